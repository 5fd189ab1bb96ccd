"""The paper-scale run configurations (Table 1 step sizes of the reference code), shared by the notebooks' defaults,
the benchmark and any pre-computation of the run cache.

The run plan is science-layer data: it reads the run designs of :mod:`companion.mesa.evidence` and the step-size
rule of :mod:`companion.mesa.stability`, and never a result (the results read it)."""

from __future__ import annotations

import inspect
import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from companion.mesa.evidence import first_step_kwargs, replicate_kwargs, replicate_sets, sweep_replicates
from companion.mesa.stability import euler_rate_design, stable_lr
from companion.mesa.train import run

COMMON = dict(d=5, T=100, m=10_000, m_test=10_000, epochs=200, seed=1)
INITS = [(0.1, 0.1), (0.5, 1.5), (2.0, 2.0)]
#: the step sizes of the paper's Table 1, per law and scale
TABLE1 = {
    "gaussian": [(0.5, 1e-3), (1.0, 1e-4), (2.0, 2e-6)],
    "sparse": [(0.5, 3e-2), (1.0, 1e-3), (2.0, 1e-4)],
    "full_one": [(1.0, 5e-4)],
}
PROBES = [("rademacher", 1.0, 1e-3), ("sparse_gaussian", 1.0, 1e-3)]  # with init (0.5, 1.5)
FIG5 = dict(law="gaussian", scale=1.0, lr=1e-4, epochs=300, sigma_ws=[0.01, 0.1])
APPENDIX_INITS = [(1.5, 0.5), (1.0, 0.2)]  # further diagonal inits (Gaussian sigma = 1, lr 1e-4)
# the appendix's contraction-rate experiment (sparse c = 1, from (1.2, 1.2), kappa x the reduced bound): n_rate
# replicate training sets at m_rate and at m_rate/4 (companion.mesa.stability.euler_rate_design)
RATE = dict(m_rate=10_000, n_rate=10)
# replicate training sets (at m_rep and m_rep/4): thm4_1 per (law, scale), its Gaussian middle scale (the one-step-GD
# deviation), thm4_3 and prop4_2 (masked and unmasked, the same training sets: m_rep_mask and m_rep_mask/4); the
# notebooks' defaults; thm4_1's sparse scales: n_rep_sparse at m_rep_sparse and m_rep_sparse/4
REPLICATES = dict(m_rep=2500, n_rep=3, n_rep_dev=16, m_rep_mask=1000, n_rep_mask=10, m_rep_sparse=1000, n_rep_sparse=10)
T_SWEEP = dict(Ts=[10, 20, 100], m_sweep=10_000, n_rep=10, kappa=0.25)  # the trained T sweep of prop4_1 (middle init)


def paper_runs() -> list[dict]:
    """Every training run the mesa notebooks do at their default (paper) parameters, as keyword arguments of
    :func:`companion.mesa.train.run`, each once: the figure runs, the replicate training sets behind the
    claims (:func:`companion.mesa.evidence.replicate_kwargs`), the T sweep and the first GD steps of Prop 4.2.
    ``python -m companion.mesa.paper --jobs 2`` computes them into the run cache; the benchmark
    (``benchmarks/bench_mesa.py --notebooks``) reports any run a notebook does that is missing here."""
    out = []
    for law in ("gaussian", "sparse"):
        for s, lr in TABLE1[law]:
            for a0, b0 in INITS:
                out.append(dict(law=law, scale=s, a0=a0, b0=b0, lr=lr, **COMMON))
    for mask in (False, True):
        for a0, b0 in INITS:
            out.append(dict(law="full_one", scale=1.0, a0=a0, b0=b0, lr=TABLE1["full_one"][0][1], mask=mask, **COMMON))
    for law, s, lr in PROBES:
        out.append(dict(law=law, scale=s, a0=0.5, b0=1.5, lr=lr, **COMMON))
    for sw in FIG5["sigma_ws"]:
        c = dict(COMMON, epochs=FIG5["epochs"])
        out.append(dict(law="gaussian", scale=1.0, init="gaussian", sigma_w=sw, lr=FIG5["lr"], **c))
    c = dict(COMMON, epochs=FIG5["epochs"])
    out.append(dict(law="gaussian", scale=1.0, a0=0.5, b0=1.5, lr=FIG5["lr"], **c))  # Fig. 5 diagonal reference
    for a0, b0 in APPENDIX_INITS:
        out.append(dict(law="gaussian", scale=1.0, a0=a0, b0=b0, lr=1e-4, **COMMON))
    # replicates (middle init): thm4_1 per law and scale, thm4_3 masked full-one, prop4_1's T sweep
    a0, b0 = INITS[len(INITS) // 2]
    d, T, E, seed = COMMON["d"], COMMON["T"], COMMON["epochs"], COMMON["seed"]
    rep = REPLICATES
    s_mid = TABLE1["gaussian"][len(TABLE1["gaussian"]) // 2][0]
    for law in ("gaussian", "sparse"):
        for s, lr in TABLE1[law]:
            n = rep["n_rep_dev"] if (law, s) == ("gaussian", s_mid) else rep["n_rep"]
            m_r = rep["m_rep"]
            if law == "sparse":  # thm4_1's sparse replicates: no moment noise, small sets suffice
                n, m_r = rep["n_rep_sparse"], rep["m_rep_sparse"]
            out += replicate_kwargs(law, s, d, T, a0, b0, lr, E, m_r, n, seed)
    for mask in (True, False):  # thm4_3: the masked ab and loss, the gap, the off-diagonals; prop4_2: the unmasked ab
        out += replicate_kwargs("full_one", 1.0, d, T, a0, b0, TABLE1["full_one"][0][1], E, rep["m_rep_mask"],
                                rep["n_rep_mask"], seed, mask=mask)
    reps = sweep_replicates(T_SWEEP["n_rep"], T_SWEEP["Ts"])
    for TT in T_SWEEP["Ts"]:
        lrT = stable_lr("gaussian", 1.0, d, TT, [(a0, b0)], T_SWEEP["kappa"], seed,
                        sets=replicate_sets(T_SWEEP["m_sweep"], reps[TT], seed))
        out += replicate_kwargs("gaussian", 1.0, d, TT, a0, b0, lrT, E, T_SWEEP["m_sweep"], reps[TT], seed)
    kappa = inspect.signature(stable_lr).parameters["kappa"].default  # the appendix page's kappa (its default)
    des = euler_rate_design("sparse", 1.0, d, T, kappa)  # the appendix's contraction rate
    out += replicate_kwargs("sparse", 1.0, d, T, des["a0"], des["a0"], des["lr"], des["epochs"], RATE["m_rate"],
                            RATE["n_rate"], seed)
    for a0, b0 in INITS:  # Prop 4.2: one GD epoch of the full-one transformer
        out.append(first_step_kwargs("full_one", d, T, COMMON["m"], a0, b0, TABLE1["full_one"][0][1], seed))
    return out


def _one(kw: dict) -> float:


    t = time.perf_counter()
    run(**kw)
    return time.perf_counter() - t


def _one_thread() -> None:

    os.environ["COMPANION_THREADS"] = "1"  # the processes share the cores


def warm_run_cache(jobs: int = 2, log=print) -> float:
    """Compute every run of :func:`paper_runs` into the run cache, ``jobs`` processes at a time with one
    kernel thread each, the costliest (m T epochs) first. Runs already cached cost a lookup. Two notebooks
    executed side by side would otherwise train their shared runs twice. Returns the wall seconds."""

    t0 = time.perf_counter()
    runs = sorted(paper_runs(), key=lambda kw: -kw["m"] * kw["T"] * kw["epochs"])
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("spawn"), initializer=_one_thread) as pool:
        for kw, sec in zip(runs, pool.map(_one, runs)):
            if log is not None and sec > 1:
                log(f"{sec:7.1f} s  {kw}")
    return time.perf_counter() - t0


if __name__ == "__main__":  # pragma: no cover - warm the run cache before a paper-scale book build
    import argparse

    from companion.mesa.train import cache_dir

    ap = argparse.ArgumentParser(description="Compute every paper-scale mesa run into the run cache.")
    ap.add_argument("--jobs", type=int, default=2, help="parallel processes (one kernel thread each)")
    jobs = ap.parse_args().jobs
    print(f"run cache: {cache_dir()}", flush=True)
    seconds = warm_run_cache(jobs, log=lambda msg: print(msg, flush=True))
    print(f"{len(paper_runs())} runs in {seconds:.0f} s with {jobs} process(es)", flush=True)
