"""Bad input gets one line naming the parameter or path and what is allowed, exit status 2, no traceback.
Most cases are refused before any kernel starts, so they run in-process through
``companion.cli.main``; the last tests run real notebooks to check that nothing finished is lost."""

import json

import pytest

from companion import cli
from companion import notebooks as nbs
from companion.run.inputs import SEED_MAX, ParameterSpecError, coerce_parameters

from _util import FIXTURES, run_cli

TOY = str(FIXTURES / "toy.md")


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "a_file").write_text("x\n")
    (tmp_path / "bad.yaml").write_text("n: [1, 2\nscale: 3\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00junk")
    (tmp_path / "adir").mkdir()
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "results.jsonl").write_text("")
    return tmp_path


# (argv with {tmp} for the test's folder, text the one line must contain)
CASES = [
    # 4. output paths
    (["run", TOY, "-o", "{tmp}/a_file"], "output directory '{tmp}/a_file': is a file"),
    (["run", TOY, "-o", "{tmp}/a_file/sub"], "output directory '{tmp}/a_file/sub': cannot be created"),
    (["sweep", TOY, "--grid", "seed=1,2", "--out", "{tmp}/a_file"], "--out '{tmp}/a_file': is a file"),
    (["results", "{tmp}/sweep", "--csv", "{tmp}/adir"], "--csv '{tmp}/adir': is a directory"),
    (["results", "{tmp}/sweep", "--csv", "{tmp}/a_file/x.csv"], "--csv '{tmp}/a_file/x.csv': cannot be written"),
    (["results", "{tmp}/adir"], "{tmp}/adir: holds no results.jsonl"),
    (["results", "{tmp}/sweep", "--plot", "{tmp}/x.gif"], "--plot '{tmp}/x.gif': give a file name ending in .png"),
    # 5. parameter files
    (["run", TOY, "-f", "{tmp}/bad.yaml"], "{tmp}/bad.yaml: is not valid YAML at line 2"),
    (["run", TOY, "-f", "{tmp}/adir"], "{tmp}/adir: is a directory"),
    (["run", TOY, "-f", "{tmp}/missing.yaml"], "{tmp}/missing.yaml: no such file"),
    (["run", TOY, "-f", "{tmp}/list.yaml"], "{tmp}/list.yaml: expected a mapping"),
    (["run", TOY, "-f", "{tmp}/binary.yaml"], "{tmp}/binary.yaml: is not a text file"),
    (["sweep", TOY, "-f", "{tmp}/bad.yaml"], "{tmp}/bad.yaml: is not valid YAML"),
    (["sweep", TOY, "-f", "{tmp}/adir"], "{tmp}/adir: is a directory"),
    # 6. unknown notebook
    (["list", "mesa/setpu"], "no notebook named 'mesa/setpu'"),
    (["run", "mesa/setpu"], "no notebook named 'mesa/setpu'"),
    # 8. seeds, before any kernel
    (["run", TOY, "-p", "seed", "-1"], "parameter 'seed': must be an integer in [0, 4294967295]"),
    (["run", TOY, "-p", "seed", "1e23"], "parameter 'seed': must be an integer in [0, 4294967295]"),
    (["run", TOY, "-p", "seed", "4294967296"], "parameter 'seed': must be an integer in [0, 4294967295]"),
    (["run", TOY, "-p", "seed", "2^70"], "parameter 'seed' expects an int; got '2^70'"),
    (["sweep", TOY, "--grid", "seed=1,-2"], "parameter 'seed': must be an integer in [0, 4294967295]"),
    # 12. grids
    (["sweep", TOY, "--grid", "n=20,,30"], "--grid n: empty value in '20,,30'"),
    (["sweep", TOY, "--grid", "n=20,30,"], "--grid n: empty value"),
    (["sweep", TOY, "--grid", "n=20,20"], "grid n: value 20 is given twice"),
    (["sweep", TOY, "--grid", "n=20,2e1"], "grid n: value 20 is given twice"),
    (["sweep", TOY, "--grid", "n=20", "--workers", "0"], "--workers must be >= 1"),
    # options
    (["run", TOY, "-p", "n", "20", "-p", "n", "30"], "parameter 'n' is given twice with -p"),
    (["run", TOY, "-p", "n", "1.5"], "parameter 'n' expects an int; got '1.5'"),
]


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(a[:1] + a[2:])[:60] for a, _ in CASES])
def test_bad_input_is_one_line_naming_it_with_exit_2(paths, capsys, monkeypatch, argv, expected):
    monkeypatch.chdir(paths)  # a default output folder (runs/, sweeps/) would land here, and be seen
    argv = [a.replace("{tmp}", str(paths)) for a in argv]
    before = sorted(p.name for p in paths.iterdir())
    status = cli.main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert status == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("companion: error: ") and expected.replace("{tmp}", str(paths)) in lines[0], err
    assert sorted(p.name for p in paths.iterdir()) == before  # nothing was created or removed


def test_debug_shows_the_traceback(paths):
    proc = run_cli("--debug", "run", TOY, "-f", str(paths / "adir"))
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "is a directory" in proc.stderr
    proc = run_cli("run", TOY, "-f", str(paths / "adir"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"companion: error: {paths / 'adir'}: is a directory; "
                                                "expected a file with a mapping of parameter names to values"]


def test_bad_companion_threads_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMPANION_THREADS", "two")
    assert cli.main(["run", TOY, "-o", str(tmp_path / "o")]) == 2
    assert "COMPANION_THREADS (environment variable): must be an integer >= 1; got 'two'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_unreachable_scheduler_fails_fast_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    from companion.run import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 2)
    out = tmp_path / "s"
    status = cli.main(["sweep", TOY, "--grid", "seed=1,2", "--out", str(out), "--scheduler", "tcp://127.0.0.1:1",
                       "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and "--scheduler tcp://127.0.0.1:1: no Dask scheduler answered within 2 s" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()  # no stray sweep.json


# ------------------------------------------------------------------ 11. numbers as `companion list` prints them
def test_scientific_notation_is_a_number_everywhere():
    specs = nbs.parameters(TOY)
    assert coerce_parameters("toy", specs, {}, {"n": "1e1", "scale": "2e-3", "seed": "4294967295"}) == {
        "n": 10, "scale": 0.002, "seed": SEED_MAX}
    assert coerce_parameters("toy", specs, {"n": 1e3})["n"] == 1000  # YAML's 1e3 is a float; an exact int
    with pytest.raises(ParameterSpecError, match="parameter 'n' expects an int"):
        coerce_parameters("toy", specs, {}, {"n": "1e-1"})
    with pytest.raises(ParameterSpecError, match="parameter 'n' expects an int"):
        coerce_parameters("toy", specs, {"n": 1e300})  # not exactly representable: refused, not rounded


def test_every_default_as_listed_is_accepted_back():
    """`companion list` prints each default as it is written in the notebook (e.g. [2e-3, 1e-2]); given
    back with -p it must be accepted, with the value the notebook itself would have."""
    import ast

    def literal(text):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return None

    for name in nbs.all_notebooks():
        specs = nbs.parameters(name)
        text = {k: s.default for k, s in specs.items()
                if s.type not in ("str", "None") and literal(s.default) is not None}
        got = coerce_parameters(name, specs, {}, text)
        for k, v in got.items():
            want = literal(specs[k].default)
            assert v == want and type(v) is type(want) or (isinstance(want, int) and float(v) == want), (name, k, v)


def test_list_items_in_scientific_notation():
    from companion.run.inputs import _convert

    assert _convert("lrs", "[2e-3, 1e-2]", "list[float]", True) == [0.002, 0.01]
    assert _convert("lrs", "2e-3,1e-2", "list[float]", True) == [0.002, 0.01]
    assert _convert("ks", "[1e1, 20]", "list[int]", True) == [10, 20]
    assert _convert("xs", "[2e-3, a]", "list", True) == [0.002, "a"]
    with pytest.raises(ParameterSpecError, match="without empty elements"):
        _convert("lrs", "2e-3,,1e-2", "list[float]", True)


# ------------------------------------------------------------------ 13. point folders keep the swept values
def test_point_folder_names_keep_the_swept_values():
    from companion.run.grid import point_id

    p = {"a_long_fixed_name": 1.23456789, "another_long_fixed_name": [1, 2, 3, 4, 5, 6], "lr": 0.05, "seed": 7}
    pid = point_id(p, swept=["lr", "seed"])
    assert pid.endswith("_lr=0.05_seed=7")
    assert point_id(dict(p, a_long_fixed_name=2.0), swept=["lr", "seed"]) != pid  # the hash covers everything
    assert "seed=7" in point_id(p)  # every parameter, none cut at 60 characters


# ------------------------------------------------------------------ 1. a refused or failed rerun loses nothing
def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.slow
def test_rerun_into_a_finished_output_never_loses_it(tmp_path):
    out = tmp_path / "run"
    first = run_cli("run", TOY, "-p", "n", "50", "-o", str(out), "--quiet")
    assert first.returncode == 0, first.stderr
    kept = _snapshot(out)
    assert {"run.json", "toy.ipynb", "toy.jsonl"} <= set(kept)

    # without --overwrite: refused before any kernel
    proc = run_cli("run", TOY, "-p", "n", "60", "-o", str(out))
    assert proc.returncode == 2 and "holds a previous run (run.json)" in proc.stderr and "--overwrite" in proc.stderr
    # the notebook's own range check: refused, one line, no kernel noise; the old run untouched
    proc = run_cli("run", TOY, "-p", "n", "3", "-o", str(out), "--overwrite")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["companion: error: toy: parameter 'n': must be an integer >= 10; got 3"]
    assert _snapshot(out) == kept
    # a crash: kept beside the old run, not over it
    proc = run_cli("run", TOY, "-p", "n", "50", "-p", "crash", "true", "-o", str(out), "--overwrite")
    assert proc.returncode == 1 and "crash requested" in proc.stderr
    assert _snapshot(out) == kept
    failed = [p for p in tmp_path.iterdir() if p.name.startswith("run.failed-")]
    assert len(failed) == 1 and json.loads((failed[0] / "run.json").read_text())["status"] == "error"
    assert str(failed[0]) in proc.stderr
    # a finished run replaces it
    proc = run_cli("run", TOY, "-p", "n", "70", "-o", str(out), "--overwrite", "--quiet")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["parameters"]["n"] == 70 and run["output_dir"] == str(out)
    assert run["parameters"]["results_dir"] == str(out)
    assert json.loads((out / "toy.jsonl").read_text().splitlines()[0])["parameters"]["n"] == 70
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name or ".old-" in p.name]


@pytest.mark.slow
def test_a_folder_without_a_run_keeps_its_files(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "my-params.yaml").write_text("n: 40\n")
    proc = run_cli("run", TOY, "-f", str(out / "my-params.yaml"), "-o", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert (out / "my-params.yaml").read_text() == "n: 40\n" and (out / "run.json").is_file()
    assert json.loads((out / "run.json").read_text())["parameters"]["n"] == 40


@pytest.mark.slow
def test_benchmark_and_tool_scripts_refuse_unknown_options():
    """Every script in ``benchmarks/`` and ``tools/`` refuses an option it does not know, before any work: one
    line naming it, exit status 2 (a benchmark that ignored ``--help`` ran for minutes). ``tools/run_suite.py``
    hands its options to pytest, whose refusal (exit status 4) it passes on."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    scripts = sorted([*root.glob("benchmarks/*.py"), *root.glob("tools/*.py")])
    assert len(scripts) >= 10
    procs = {s: subprocess.Popen([sys.executable, str(s), "--no-such-option"], cwd=root, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for s in scripts}
    for s, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"{s.relative_to(root)} did not refuse --no-such-option: still running after 120 s")
        if s.name == "run_suite.py":
            assert proc.returncode == 4 and "unrecognized arguments: --no-such-option" in out, (proc.returncode, out)
            continue
        assert proc.returncode == 2, (s.name, proc.returncode, err[-500:])
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
        assert len(lines) == 1 and "--no-such-option" in lines[0], (s.name, err)


def test_the_command_line_is_parsed_before_torch_or_matplotlib_is_imported():
    """`companion --help`, a refused argument and each sweep worker's `companion run` build the parser first: it
    imports neither the verdict module nor torch or matplotlib (a default read from companion.calibration would)."""
    import subprocess
    import sys

    code = ("import sys\nfrom companion.cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'companion.verdict') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
