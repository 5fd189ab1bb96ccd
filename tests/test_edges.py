"""The user's edges (issue 27): what cannot work is refused before it starts, a killed sweep leaves nothing
behind, one sweep per folder, one spelling of -o, installable where users are."""

import os
import re
import signal
import subprocess
import sys
import time
import tomllib

import pytest

from companion import cli
from companion.run.store import read_results
from companion.threads import available_cores

from _util import FIXTURES, ROOT, run_cli

TOY = str(FIXTURES / "toy.md")


class _Started(Exception):
    """Raised by the fake LocalCluster: the sweep got as far as starting its workers."""


@pytest.fixture
def no_cluster(monkeypatch):
    """Replace Dask's LocalCluster: record the workers asked for and stop there (nothing is started)."""
    import dask.distributed

    asked: list[int] = []

    def fake(*args, n_workers=None, **kwargs):
        asked.append(n_workers)
        raise _Started(n_workers)

    monkeypatch.setattr(dask.distributed, "LocalCluster", fake)
    import papermill  # noqa: F401  (the one-time imports are not what is timed)

    from companion import notebooks

    notebooks.parameters(TOY)
    return asked


def _grid(n: int, start: int = 1) -> str:
    return ",".join(str(i) for i in range(start, start + n))


# ---------------------------------------------------------------------------------------------- points
def test_a_million_points_are_refused_in_one_line_before_any_worker(tmp_path, capsys, no_cluster):
    out = tmp_path / "big"
    t0 = time.perf_counter()
    rc = cli.main(["sweep", "mesa/setup", "--grid", f"seed={_grid(1000)}", "--grid", f"m={_grid(1000, 1000)}",
                   "-o", str(out)])
    seconds = time.perf_counter() - t0
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and seconds < 2, (rc, seconds)
    assert err == ["companion: error: --max-points: the grid has 1000000 points, more than the limit of 10000; "
                   "sweep fewer values or raise --max-points"]
    assert no_cluster == [] and not out.exists()


def test_max_points_is_an_option_with_a_stated_default(capsys, no_cluster, tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    assert re.search(r"--max-points N\s+refuse a grid of more than N points\s+\(default\s+10000\)",
                     capsys.readouterr().out)
    with pytest.raises(_Started):  # the count is shown before any work
        cli.main(["sweep", TOY, "--grid", "seed=1,2,3", "-o", str(tmp_path / "c"), "--quiet"])
    assert "companion: 3 point(s) to sweep (--max-points 10000)" in capsys.readouterr().out
    assert cli.main(["sweep", TOY, "--grid", "seed=1,2,3", "--max-points", "2", "-o", str(tmp_path / "s")]) == 2
    assert "the grid has 3 points, more than the limit of 2" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- workers
def test_workers_beyond_the_cores_are_capped_with_a_note(tmp_path, capsys, no_cluster):
    t0 = time.perf_counter()
    with pytest.raises(_Started):
        cli.main(["sweep", TOY, "--grid", f"seed={_grid(40)}", "--workers", "1000", "-o", str(tmp_path / "w"),
                  "--quiet"])
    assert time.perf_counter() - t0 < 2
    cores = available_cores()
    assert no_cluster == [cores]  # not one worker more than the machine has cores
    assert f"--workers 1000: this machine has {cores} cores; using {cores} local workers" in capsys.readouterr().err
    assert not (tmp_path / "w" / "sweep.lock").exists()  # released on the way out


def test_the_workers_policy_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"never more than this machine's cores ({available_cores()} here)" in text and "capped" in text


# -------------------------------------------------------------------------------------------------- -o
def test_run_and_sweep_take_the_same_output_options():
    parser = cli.build_parser()
    assert parser.parse_args(["sweep", "x", "-o", "D"]).out == "D"
    assert parser.parse_args(["sweep", "x", "--out", "D"]).out == "D"
    assert parser.parse_args(["run", "x", "-o", "D"]).output == "D"
    assert parser.parse_args(["run", "x", "--out", "D"]).output == "D"


# ------------------------------------------------------------------------------------------------ lock
def _hold_lock(out):
    """Another process holding the lock of ``out`` (until killed)."""
    code = ("import sys, time; from companion.run.sweep import SweepLock; SweepLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_sweep_on_a_locked_folder_is_refused_naming_the_holder(tmp_path, capsys, no_cluster):
    out = tmp_path / "s"
    out.mkdir()
    holder = _hold_lock(out)
    try:
        for extra in ([], ["--resume"]):
            t0 = time.perf_counter()
            rc = cli.main(["sweep", TOY, "--grid", "seed=21,22,23", "-o", str(out), "--quiet", *extra])
            assert rc == 2 and time.perf_counter() - t0 < 2
            err = capsys.readouterr().err.strip().splitlines()[-1]
            assert f"lock {out / 'sweep.lock'} held by pid {holder.pid}" in err, err
        assert no_cluster == []
    finally:
        holder.kill()
        holder.wait()
    # the holder died without a word: its lock is stale and taken over
    from companion.run.store import SweepLock

    lock = SweepLock(out).acquire()
    assert (out / "sweep.lock").read_text().strip() == str(os.getpid())
    lock.release()
    assert not (out / "sweep.lock").exists()


@pytest.mark.slow  # Dask sweep processes and kernels: not in the fast lane (make test-fast)
def test_three_sweeps_on_one_folder_run_every_point_once(tmp_path):
    """Three `companion sweep --out SAME` at once (one with --resume): one runs, the others are refused
    naming the lock and the pid of the one that runs; every point has exactly one record."""
    out = tmp_path / "same"
    args = [sys.executable, "-m", "companion", "sweep", TOY, "--grid", "seed=21,22,23", "-p", "n", "50",
            "-o", str(out), "--quiet", "--workers", "1"]
    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (out / "sweep.lock").is_file():
        time.sleep(0.05)
    others = [subprocess.run(args + extra, cwd=ROOT, capture_output=True, text=True, timeout=120)
              for extra in ([], ["--resume"])]
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    for proc in others:
        assert proc.returncode == 2, proc.stderr
        assert f"held by pid {first.pid}" in proc.stderr.strip().splitlines()[-1]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and len(read_results(out)) == 3


# -------------------------------------------------------------------------------------------- partials
def _leftovers(out):
    points = out / "points"
    return sorted(p.name for p in points.iterdir() if p.name.startswith(".")) if points.is_dir() else []


@pytest.mark.slow  # Dask sweep processes and kernels: not in the fast lane (make test-fast)
def test_a_sweep_killed_before_its_first_point_leaves_nothing_after_the_next_run(tmp_path):
    out = tmp_path / "k"
    args = ["sweep", TOY, "--grid", "seed=1,2", "-p", "n", "50", "-o", str(out), "--quiet", "--workers", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "companion", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(".partial-" in n for n in _leftovers(out)):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, its workers and the point's run
    proc.wait()
    assert any(".partial-" in n for n in _leftovers(out)) and not read_results(out)
    time.sleep(1.5)  # the orphaned run notices its worker is gone and exits
    # a folder of a stale point that is not running, as a crash of an older version could leave
    (out / "points" / ".0000000000_seed=9.partial-abc").mkdir()

    proc = run_cli(*args, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "leftover(s) of interrupted runs" in proc.stderr
    assert _leftovers(out) == [] and len(read_results(out)) == 2


@pytest.mark.slow  # Dask sweep processes and kernels: not in the fast lane (make test-fast)
def test_a_new_sweep_clears_leftovers_too(tmp_path):
    out = tmp_path / "n"
    (out / "points" / ".abc_seed=1.partial-x1").mkdir(parents=True)
    (out / "points" / ".abc_seed=1.params.yaml").write_text("seed: 1\n")
    proc = run_cli("sweep", TOY, "--grid", "seed=1", "-p", "n", "50", "-o", str(out), "--quiet", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert _leftovers(out) == [] and len(read_results(out)) == 1


# ------------------------------------------------------------------------------------------ packaging
def test_installable_on_newer_pythons_and_no_exact_pins_in_the_package_metadata():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert not [r for r in reqs if "==" in r], "exact pins belong in constraints.txt"
    assert any(re.fullmatch(r"torch>=2\.\d+,<3", r) for r in reqs)
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11 or newer" in readme and "CI tests Python 3.11 only" in readme


# ------------------------------------------------------------------------- step sizes of every run (row 3)
# The reported case: mesa/thm4_1_emergence at d = 8, T = 60, m = 2000, m_rep = 2000, sigmas [1.0], lrs_gauss
# [2e-4]. The figure runs at m = 2000 train; the replicate set 8 of 16 at m_rep/4 = 500 sequences (data seed
# replicate_seed(1, 24) = 24000073) diverges at epoch 4, and set 10 (26000079) at epoch 6: their one-coordinate
# sample sixth moment is three times the population's, and so is the curvature at the limit.
REPORTED = dict(d=8, T=60, m=2000, m_rep=2000, sigmas=[1.0], lrs_gauss=[2e-4])
THM41_DEFAULTS = dict(d=5, T=100, m=10000, sigmas=[0.5, 1.0, 2.0], lrs_gauss=[1e-3, 1e-4, 2e-6], cs=[0.5, 1.0, 2.0],
                      lrs_sparse=[3e-2, 1e-3, 1e-4], a0s=[0.1, 0.5, 2.0], b0s=[0.1, 1.5, 2.0], m_rep=2500, n_rep=3,
                      n_rep_dev=16, seed=1)


def _thm41_runs(**kw):
    from companion.mesa import step_sizes

    p = {**THM41_DEFAULTS, **kw}
    runs = step_sizes.thm4_1_runs(p["sigmas"], p["lrs_gauss"], p["cs"], p["lrs_sparse"], list(zip(p["a0s"], p["b0s"])),
                                  p["d"], p["T"], p["m"], p["m_rep"], p["n_rep"], p["n_rep_dev"], p["seed"])
    return runs, p["d"], p["T"]


def test_the_reported_step_size_is_refused_naming_the_replicate_set_that_diverges():
    from companion.mesa import step_sizes
    from companion.params import ParameterError

    start = time.perf_counter()
    with pytest.raises(ParameterError) as err:
        step_sizes.check_runs(*_thm41_runs(**REPORTED))
    assert time.perf_counter() - start < 10
    msg = str(err.value)
    assert msg.startswith("parameter 'lrs_gauss': 0.0002 is unstable") and "\n" not in msg
    assert "m = 500" in msg and "data seed 24000073" in msg and "use a step size below 0.000181" in msg


def test_the_page_defaults_smoke_point_and_smaller_step_sizes_are_not_refused():
    import yaml

    from companion.mesa import step_sizes

    smoke = yaml.safe_load((ROOT / "tests" / "smoke" / "mesa.yaml").read_text())["mesa/thm4_1_emergence"]
    assert step_sizes.check_runs(*_thm41_runs())["margin"] > 1  # defaults: closest 1.26, a set of 625 at 2.9/lambda
    assert step_sizes.check_runs(*_thm41_runs(**smoke))["margin"] > 1
    # the reported sizes at 1.5e-4 (catapult, trains) and with m_rep = 1000 (its sets differ): accepted
    assert step_sizes.check_runs(*_thm41_runs(**{**REPORTED, "lrs_gauss": [1.5e-4]}))["margin"] > 1
    assert step_sizes.check_runs(*_thm41_runs(**{**REPORTED, "m_rep": 1000}))["margin"] > 1


def test_the_domain_points_step_sizes_from_the_stability_bound_are_not_refused():
    import yaml

    from companion.mesa import stability, step_sizes

    for point in yaml.safe_load((ROOT / "tests" / "domain" / "mesa.yaml").read_text())["mesa/thm4_1_emergence"]:
        p = {**THM41_DEFAULTS, **point}
        inits = list(zip(p["a0s"], p["b0s"]))
        lrs = {law: p[key] or [stability.stable_lr(law, s, p["d"], p["T"], inits, 0.25, p["seed"]) for s in p[scales]]
               for law, key, scales in (("gaussian", "lrs_gauss", "sigmas"), ("sparse", "lrs_sparse", "cs"))}
        assert step_sizes.check_runs(*_thm41_runs(**{**point, "lrs_gauss": lrs["gaussian"],
                                                     "lrs_sparse": lrs["sparse"]}))["margin"] > 1


@pytest.mark.slow  # trains or power-iterates the Hessian on real training sets (18-43 s)
def test_the_curvature_estimate_is_the_empirical_hessian_of_the_run_own_training_set():
    """limit_curvature against the power iteration on the full empirical Hessian, on the diverging set and
    on a set of the same size that trains (1.5e4 apart: the population bound cannot tell them apart)."""
    import numpy as np
    import torch

    from companion.mesa import step_sizes
    from companion.mesa import theory as th
    from companion.mesa.data import generate
    from companion.mesa.stability import hessian_max_eig
    from companion.mesa.train import init_diagonal

    al, be = th.alpha_beta("gaussian", 1.0, 8, 60)
    a, b = th.limits(0.5, 1.5, be / al)
    lams = []
    for seed in (24000073, 17000052):
        data = generate("gaussian", 500, 8, 60, 1.0, np.random.default_rng([seed, 0]), torch.complex128)
        power = hessian_max_eig(data, *init_diagonal(8, a, b, torch.complex128))
        est = step_sizes.limit_curvature("gaussian", 1.0, 8, 60, 500, (seed, 0), a, b)
        assert 1 / step_sizes.ESTIMATE_LOW <= est / power <= 1.05, (seed, est, power)
        lams.append(power)
    assert lams[0] > 2.5 * lams[1]


@pytest.mark.slow  # trains or power-iterates the Hessian on real training sets (18-43 s)
def test_the_refused_replicate_set_really_diverges():
    from companion.mesa.train import RunConfig, TrainingDiverged, train

    cfg = RunConfig(law="gaussian", scale=1.0, d=8, T=60, m=500, m_test=10, a0=0.5, b0=1.5, lr=2e-4, epochs=12,
                    seed=24000073)
    with pytest.raises(TrainingDiverged, match="diverged at epoch 4"):
        train(cfg)


@pytest.mark.slow
def test_an_accepted_step_size_past_two_over_lambda_catapults_and_trains():
    """1.5e-4 on the set that diverges at 2e-4: eta lambda = 3.0 at the limit, accepted; it trains 200 epochs."""
    from companion.mesa.train import RunConfig, train

    r = train(RunConfig(law="gaussian", scale=1.0, d=8, T=60, m=500, m_test=10, a0=0.5, b0=1.5, lr=1.5e-4,
                        epochs=200, seed=24000073))
    assert abs(r.ab[-1] / 0.17983 - 1) < 0.2


@pytest.mark.slow  # executes a notebook with papermill: not in the fast lane (make test-fast)
def test_thm4_1_refuses_the_reported_case_in_its_validation_cell_before_training(tmp_path):
    args = ["run", "mesa/thm4_1_emergence", "-o", str(tmp_path / "r")]
    for k, v in REPORTED.items():
        args += ["-p", k, str(v)]
    start = time.perf_counter()
    proc = run_cli(*args, env={"COMPANION_CACHE_DIR": "off"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "parameter 'lrs_gauss'" in ln]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "use a step size below" in lines[0]
    assert time.perf_counter() - start < 120  # the kernel's start and the check; the run trains for minutes


# ---------------------------------------------------------------------- a killed `companion run -o OUT`
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _run_partials(parent, name="out"):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.partial-"))


def test_a_run_clears_the_partial_folders_of_dead_runs_into_the_same_output_and_no_live_one(tmp_path):
    import socket

    from companion.run import outputs

    host = socket.gethostname()
    me = f"{os.getpid()} {outputs._process_start(os.getpid())} {host}\n"
    folders = {
        ".out.partial-dead0001": f"{_dead_pid()} 12345 {host}\n",  # its run was killed: removed
        ".out.partial-reused01": f"{os.getpid()} 1 {host}\n",  # the pid now names another process: removed
        ".out.partial-live0001": me,  # a run that is still going: kept
        ".out.partial-other001": f"{_dead_pid()} 12345 another-host\n",  # another machine's, on a shared disk: kept
        ".out.partial-nopid001": None,  # no owner file (an older version's): kept
        ".other.partial-dead01": f"{_dead_pid()} 12345 {host}\n",  # another output's: not ours to clear
    }
    for name, owner in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.ipynb").write_text("{}")
        if owner is not None:
            (tmp_path / name / outputs.OWNER_FILE).write_text(owner)
    work = outputs.prepare_output(tmp_path / "out", overwrite=False)
    assert (work / outputs.OWNER_FILE).read_text() == me  # the new run names itself
    kept = [".out.partial-live0001", ".out.partial-nopid001", ".out.partial-other001", work.name]
    assert _run_partials(tmp_path) == sorted(kept)
    assert (tmp_path / ".other.partial-dead01").is_dir()


@pytest.mark.slow  # companion run processes and kernels: not in the fast lane (make test-fast)
def test_a_killed_run_leaves_nothing_after_the_next_run_into_the_same_output(tmp_path):
    out = tmp_path / "out"
    args = ["run", TOY, "-p", "n", "50", "-o", str(out), "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "companion", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not _run_partials(tmp_path):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its kernel
    proc.wait()
    assert _run_partials(tmp_path) and not out.exists()
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    assert _run_partials(tmp_path) == [] and (out / "run.json").is_file()
    assert not (out / "run.pid").exists()  # the owner file is not part of the output


# ------------------------------------------------------------------------ memory: sizes refused up front
def _validation_cells(notebook):
    """The ``parameters`` cell and the validation cell right after it, as the kernel runs them."""
    from companion import notebooks as nbs

    code = [c for c in nbs.load(nbs.resolve(notebook)).cells if c.cell_type == "code"]
    i = next(i for i, c in enumerate(code) if "parameters" in c.metadata.get("tags", []))
    return code[i].source, code[i + 1].source


def _validate(notebook, overrides):
    """Run the page's validation path with papermill's overrides; returns (ParameterError or None, seconds of
    the validation cell, its imports done beforehand)."""
    from companion.params import ParameterError

    params, check = _validation_cells(notebook)
    ns: dict = {}
    exec(params, ns)
    ns.update(overrides)
    exec("\n".join(ln for ln in check.splitlines() if ln.startswith(("import ", "from "))), dict(ns))
    start = time.perf_counter()
    try:
        exec(check, ns)
    except ParameterError as exc:
        return exc, time.perf_counter() - start
    return None, time.perf_counter() - start


MESA_MAX = dict(m=10**6, m_test=10**6, T=1000, d=8)
#: (notebook, a size beyond its range, the largest sizes its ranges allow (with the step sizes left to the page's
#: own bound where it computes one), the parameter names the memory refusal gives)
SIZE_CASES = [
    ("mesa/setup", {"m": 10**8}, dict(m=10**6, T=1000, d=8), "m, T, d"),
    ("mesa/thm4_1_emergence", {"m": 10**8}, dict(MESA_MAX, lrs_gauss=[], lrs_sparse=[]), "m, T, d"),
    ("mesa/thm4_2_capability", {"m": 10**8}, dict(MESA_MAX, lrs_sparse=[], probe_lrs=[]), "m, T, d"),
    ("mesa/prop4_1_gaussian", {"m_sweep": 10**8}, dict(MESA_MAX, m_sweep=10**6, Ts=[1000], lrs_gauss=[]), "m, T, d"),
    ("mesa/prop4_2_beyond", {"m": 10**8}, dict(MESA_MAX, m_mc=10**6, lr=0.0), "m, T, d"),
    ("mesa/thm4_3_masking", {"m": 10**8}, dict(MESA_MAX, lr=0.0), "m, T, d"),
    ("mesa/appendix_experiments", {"m": 10**8}, dict(MESA_MAX, lr=0.0), "m, T, d"),
    ("cot/setup", {"batch": 10**8}, dict(batch=10**5, d=200, n=2000, k=200), "batch, d, n, k"),
    ("cot/thm3_1_no_cot", {"num_mc": 10**8}, dict(num_mc=10**7, d=50, n=5000), "num_mc, d"),
    ("cot/cor3_1_floor", {"num_mc": 10**8}, dict(num_mc=10**7, d_list=[100]), "num_mc, d_list"),
    ("cot/thm3_2_construction", {"num_model": 10**8}, dict(num_model=10**6, d=100, n=2000, k_list=[200], mp_levels=3),
     "num_model, d, n, k_list"),
    ("cot/thm4_1_dynamics", {"eval_batch": 10**8}, dict(eval_batch=10**6, d=20, n=200, k=50), "eval_batch, d, n, k"),
    ("cot/thm4_2_ood", {"eval_batch": 10**8}, dict(eval_batch=10**6, d=30, n=500, k_list=[100]), "eval_batch, k_list"),
    ("cot/experiments", {"eval_batch": 10**8}, dict(eval_batch=10**6, d=30, n_list=[120], eta_list=[0.4]),
     "eval_batch, n_list, k"),
    ("cot/looped", {"num_check": 10**8}, dict(num_check=10**6, d=30, n=500), "num_check, d, n"),
]


def test_every_page_with_a_size_is_in_the_memory_cases():
    from companion import notebooks as nbs

    assert sorted(c[0] for c in SIZE_CASES) == sorted(nbs.all_notebooks())


@pytest.mark.parametrize("notebook,huge,largest,names", SIZE_CASES, ids=[c[0] for c in SIZE_CASES])
def test_a_huge_size_is_refused_by_the_validation_cell_before_any_work(notebook, huge, largest, names):
    (name, value), = huge.items()
    err, seconds = _validate(notebook, huge)
    assert err is not None and err.name == name and f"got {value}" in str(err) and seconds < 2, (err, seconds)
    # the largest sizes the ranges allow: refused by the memory estimate, before any step-size bound is computed
    err, seconds = _validate(notebook, largest)
    assert err is not None and err.name == names and "GiB" in str(err) and "\n" not in str(err), err
    assert seconds < 2, (notebook, seconds)


def test_thm4_1_memory_covers_the_one_step_prefix_sums(monkeypatch):
    """At m = 160, m_test = 10, T = 1000, d = 8 the largest allocation is the one-step-GD check's prefix sums
    (300 sequences, three (T, d, d) complex128 arrays: 0.9 GB), not the position tables (0.08 GB)."""
    monkeypatch.setenv("COMPANION_MAX_BYTES", str(5 * 10**8))
    err, _ = _validate("mesa/thm4_1_emergence", dict(m=160, m_rep=160, m_rep_sparse=160, m_test=10, T=1000, d=8))
    assert err is not None and err.name == "m, T, d" and "0.858 GiB" in str(err), err


@pytest.mark.slow  # companion run processes: not in the fast lane (make test-fast)
def test_the_largest_sizes_are_refused_by_companion_run_in_one_line(tmp_path):
    args = ["run", "mesa/thm4_3_masking", "-o", str(tmp_path / "r")]
    for k, v in MESA_MAX.items():
        args += ["-p", k, str(v)]
    start = time.perf_counter()
    proc = run_cli(*args, "--quiet", env={"COMPANION_CACHE_DIR": "off"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("companion: error: mesa/thm4_3_masking: parameter 'm, T, d': needs about 477 GiB")
    assert time.perf_counter() - start < 30  # the kernel's start; the stability bound alone took 48 s here
    assert not any(tmp_path.iterdir())
