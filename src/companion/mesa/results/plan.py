"""The plan of the paper-scale mesa runs: every run the mesa pages train at their defaults (the paper's settings),
each once, read from each result's own design, and the computation of all of them into the run cache.

Each result module describes its runs once, in its ``design`` function (sizes, seeds, step sizes, replicate sets);
the page trains what that design lists, and its ``paper_runs`` is that design at the paper's settings
(:mod:`companion.mesa.paper`). This module only collects them: a run two pages share (the Gaussian runs of
Theorem 4.1 and Proposition 4.1, the full-one runs of Proposition 4.2 and Theorem 4.3) is listed once.

``python -m companion.mesa.results.plan --jobs 2`` computes them into the run cache (as ``companion book`` does
before the pages), so that pages executed side by side do not train their shared runs twice.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from multiprocessing import get_context

from companion.mesa.results import appendix, prop4_1, prop4_2, thm4_1, thm4_2, thm4_3
from companion.mesa.train import RunConfig, run

__all__ = ["DESIGNED", "paper_runs", "warm_run_cache"]

#: the result modules whose pages train (the setting page trains nothing), in book order
DESIGNED = (thm4_1, thm4_2, prop4_1, prop4_2, thm4_3, appendix)


def paper_runs() -> list[dict]:
    """Every training run of the mesa pages at their defaults, as keyword arguments of
    :func:`companion.mesa.train.run`, each once (two runs are one when their :class:`companion.mesa.train.RunConfig`
    is): the ``paper_runs()`` of every module of :data:`DESIGNED`, in that order."""
    out, seen = [], set()
    for module in DESIGNED:
        for kw in module.paper_runs():
            key = tuple(sorted(asdict(RunConfig(**kw)).items()))
            if key not in seen:
                seen.add(key)
                out.append(kw)
    return out


def _one(kw: dict) -> float:
    t = time.perf_counter()
    run(**kw)
    return time.perf_counter() - t


def _one_thread() -> None:
    os.environ["COMPANION_THREADS"] = "1"  # the processes share the cores


def warm_run_cache(jobs: int = 2, log=print) -> float:
    """Compute every run of :func:`paper_runs` into the run cache, ``jobs`` processes at a time with one
    kernel thread each, the costliest (m T epochs) first. Runs already cached cost a lookup. Returns the wall
    seconds."""
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
