"""The paper-scale run configurations (Table 1 step sizes of the reference code), shared by the notebooks' defaults,
the benchmark and any pre-computation of the run cache."""

from __future__ import annotations

from companion.mesa import theory

COMMON = dict(d=5, T=100, m=10_000, m_test=10_000, epochs=200, seed=1)
INITS = [(0.1, 0.1), (0.5, 1.5), (2.0, 2.0)]
TABLE1 = {
    "gaussian": [(0.5, 1e-3), (1.0, 1e-4), (2.0, 2e-6)],
    "sparse": [(0.5, 3e-2), (1.0, 1e-3), (2.0, 1e-4)],
    "full_one": [(1.0, 5e-4)],
}
PROBES = [("rademacher", 1.0, 1e-3), ("sparse_gaussian", 1.0, 1e-3)]  # with init (0.5, 1.5)
FIG5 = dict(law="gaussian", scale=1.0, lr=1e-4, epochs=300, sigma_ws=[0.01, 0.1])
APPENDIX_INITS = [(1.5, 0.5), (1.0, 0.2)]  # further diagonal inits (Gaussian sigma = 1, lr 1e-4)
SMALL_T = dict(Ts=[3, 4, 6, 10, 20, 50], kappa=0.25, init=(0.5, 1.5), law="gaussian", scale=1.0)


def small_T_lr(T: int, kappa: float, a0: float, b0: float, law: str = "gaussian", scale: float = 1.0, d: int = 5) -> float:
    """Step size at a fraction kappa of the stability bound 2 / (alpha (a0^2 + b0^2))."""
    al, _ = theory.alpha_beta(law, scale, d, T)
    return kappa * 2.0 / (al * (a0**2 + b0**2))


def paper_runs() -> list[dict]:
    """Every paper-scale run of the mesa notebooks, as keyword arguments of :func:`companion.mesa.train.run`."""
    out = []
    for law in ("gaussian", "sparse"):
        for s, lr in TABLE1[law]:
            for a0, b0 in INITS:
                out.append(dict(law=law, scale=s, a0=a0, b0=b0, lr=lr, **COMMON))
    for mask in (False, True):
        for a0, b0 in INITS:
            out.append(dict(law="full_one", scale=1.0, a0=a0, b0=b0, lr=5e-4, mask=mask, **COMMON))
    for law, s, lr in PROBES:
        out.append(dict(law=law, scale=s, a0=0.5, b0=1.5, lr=lr, **COMMON))
    for sw in FIG5["sigma_ws"]:
        c = dict(COMMON, epochs=FIG5["epochs"])
        out.append(dict(law="gaussian", scale=1.0, init="gaussian", sigma_w=sw, lr=FIG5["lr"], **c))
    c = dict(COMMON, epochs=FIG5["epochs"])
    out.append(dict(law="gaussian", scale=1.0, a0=0.5, b0=1.5, lr=FIG5["lr"], **c))  # Fig. 5 diagonal reference
    for a0, b0 in APPENDIX_INITS:
        out.append(dict(law="gaussian", scale=1.0, a0=a0, b0=b0, lr=1e-4, **COMMON))
    a0, b0 = SMALL_T["init"]
    for T in SMALL_T["Ts"]:
        c = dict(COMMON, T=T)
        out.append(dict(law="gaussian", scale=1.0, a0=a0, b0=b0, lr=small_T_lr(T, SMALL_T["kappa"], a0, b0), **c))
    return out


def _one(kw: dict) -> float:
    import time

    from companion.mesa.train import run

    t = time.perf_counter()
    run(**kw)
    return time.perf_counter() - t


if __name__ == "__main__":  # pragma: no cover - warm the run cache before a paper-scale book build
    import argparse
    import time
    from concurrent.futures import ProcessPoolExecutor

    from companion.mesa.train import cache_dir

    ap = argparse.ArgumentParser(description="Compute every paper-scale mesa run into the run cache.")
    ap.add_argument("--jobs", type=int, default=1, help="parallel processes (one torch thread each)")
    jobs = ap.parse_args().jobs
    print(f"run cache: {cache_dir()}", flush=True)
    t0 = time.perf_counter()
    runs = paper_runs()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for kw, sec in zip(runs, pool.map(_one, runs)):
            print(f"{sec:7.1f} s  {kw}", flush=True)
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s with {jobs} process(es)", flush=True)
