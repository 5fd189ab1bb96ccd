"""Every page refuses a size that would not fit in memory in its validation cell, in one line, before any work."""


import time

import pytest

from _util import run_cli


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



def test_the_looped_page_refuses_a_training_shorter_than_two_memories_of_adam():
    """`iso_steps` below companion.cot.results.looped.ADAM_HORIZON is refused in one line naming it; at the horizon
    the defaults pass. The sparse-block models train at least as long."""
    from companion.cot.results import looped

    err, _ = _validate("cot/looped", {"iso_steps": looped.ADAM_HORIZON - 1})
    assert err is not None and err.name == "iso_steps" and "\n" not in str(err), err
    assert _validate("cot/looped", {"iso_steps": looped.ADAM_HORIZON})[0] is None
    assert looped.ADAM_HORIZON == 2 * looped.ADAM_MEMORY and looped.SPARSE_TRAIN["steps"] >= looped.ADAM_HORIZON

def test_thm4_1_memory_covers_the_one_step_prefix_sums(monkeypatch):
    """At m = 160, m_test = 10, T = 1000, d = 8 the largest allocation is the one-step-GD check's prefix sums
    (300 sequences, three (T, d, d) complex128 arrays: 0.9 GB), not the position tables (0.08 GB)."""
    monkeypatch.setenv("COMPANION_MAX_BYTES", str(5 * 10**8))
    err, _ = _validate("mesa/thm4_1_emergence", dict(m=160, m_rep=160, m_rep_sparse=160, m_test=10, T=1000, d=8))
    assert err is not None and err.name == "m, T, d" and "0.858 GiB" in str(err), err


@pytest.mark.slow  # companion run processes: not in the fast suite (make test-fast)
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
