"""The runner: parameters are validated before any kernel starts; failures are clear; reruns are identical."""

import json

import pytest

from companion import notebooks as nbs
from companion.run.execute import NotebookFailed, run_notebook
from companion.run.inputs import ParameterSpecError, coerce_parameters

from _util import FIXTURES, run_cli

TOY = str(FIXTURES / "toy.md")


def test_parameters_are_read_from_the_myst_file():
    specs = nbs.parameters(TOY)
    assert list(specs) == ["n", "scale", "seed", "fail", "crash", "results_dir"]
    assert specs["n"].type == "int" and specs["n"].default == "2000"
    assert specs["scale"].type == "float" and "standard deviation" in specs["scale"].help


def test_help_with_equals_sign_is_not_lost(tmp_path):
    # papermill's own parser drops such a line; the runner must still see the parameter
    src = (FIXTURES / "toy.md").read_text().replace("# Monte-Carlo samples, at least 10", "# samples, n >= 10")
    p = tmp_path / "toy_eq.md"
    p.write_text(src)
    specs = nbs.parameters(p)
    assert "n" in specs and specs["n"].type == "int" and specs["n"].help == "samples, n >= 10"


def test_coercion_from_text_and_typed_values():
    specs = nbs.parameters(TOY)
    got = coerce_parameters("toy", specs, {"scale": 2}, {"n": "50", "fail": "false"})
    assert got == {"scale": 2.0, "n": 50, "fail": False}
    assert isinstance(got["scale"], float)
    with pytest.raises(ParameterSpecError, match=r"unknown parameter 'sed' for toy \(did you mean 'seed'\?\)"):
        coerce_parameters("toy", specs, {"sed": 1})
    with pytest.raises(ParameterSpecError, match=r"parameter 'n' expects an int; got '1.5'"):
        coerce_parameters("toy", specs, {}, {"n": "1.5"})
    with pytest.raises(ParameterSpecError, match=r"parameter 'n' expects an int; got True"):
        coerce_parameters("toy", specs, {"n": True})
    with pytest.raises(ParameterSpecError, match=r"parameter 'fail' expects a bool"):
        coerce_parameters("toy", specs, {}, {"fail": "maybe"})


def test_cli_rejects_a_misspelled_parameter_before_any_kernel(tmp_path):
    proc = run_cli("run", TOY, "-p", "sacle", "2", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "unknown parameter 'sacle'" in proc.stderr and "did you mean 'scale'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing was executed


@pytest.mark.slow
def test_cli_wrong_type_and_range_errors_name_the_parameter(tmp_path):
    proc = run_cli("run", TOY, "-p", "n", "many", "-o", str(tmp_path / "a"))
    assert proc.returncode == 2 and "parameter 'n' expects an int; got 'many'" in proc.stderr
    proc = run_cli("run", TOY, "-p", "n", "3", "-o", str(tmp_path / "b"))
    assert proc.returncode == 2
    assert "parameter 'n': must be an integer >= 10; got 3" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_notebook_suggests(tmp_path):
    proc = run_cli("run", "mesa/setpu", "-o", str(tmp_path))
    assert proc.returncode == 2 and "no notebook named 'mesa/setpu'" in proc.stderr


@pytest.mark.slow
def test_failed_verdict_and_crash(tmp_path):
    with pytest.raises(NotebookFailed) as info:
        run_notebook(TOY, {"fail": True, "n": 200}, tmp_path / "fail")
    assert info.value.ename == "VerdictError"
    run = json.loads((tmp_path / "fail" / "run.json").read_text())
    assert run["status"] == "failed" and run["records"][0]["passed"] is False
    assert (tmp_path / "fail" / "toy.ipynb").is_file()  # kept for inspection

    proc = run_cli("run", TOY, "-p", "crash", "true", "-p", "n", "200", "-o", str(tmp_path / "crash"))
    assert proc.returncode == 1
    assert "RuntimeError: crash requested by the 'crash' parameter" in proc.stderr
    assert json.loads((tmp_path / "crash" / "run.json").read_text())["status"] == "error"


@pytest.mark.slow
def test_identical_reruns(tmp_path):
    a = run_notebook(TOY, {"n": 300, "seed": 7}, tmp_path / "a")
    b = run_notebook(TOY, {"n": 300, "seed": 7}, tmp_path / "b")
    c = run_notebook(TOY, {"n": 300, "seed": 8}, tmp_path / "c")
    assert a.ok and b.ok and c.ok
    assert a.records[0]["measured"] == b.records[0]["measured"]
    assert a.records[0]["measured"] != c.records[0]["measured"]


def test_list_shows_every_notebook_with_parameters():
    proc = run_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert list(listing) == nbs.all_notebooks()
    for name, specs in listing.items():
        assert specs, f"{name} has no parameters"


def test_a_real_notebook_rejects_a_misspelled_parameter(tmp_path):
    name = nbs.all_notebooks()[0]
    real = next(iter(nbs.parameters(name)))
    typo = real[:-1] + ("x" if real[-1] != "x" else "y") if len(real) > 1 else real + "x"
    proc = run_cli("run", name, "-p", typo, "1", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert f"unknown parameter '{typo}' for {name}" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_plain_papermill_with_a_misspelled_parameter_fails_clearly(tmp_path):
    """Even bypassing `companion run`, the notebook itself rejects an injected unknown name
    (papermill alone would only warn and silently use the default)."""
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    src = tmp_path / "toy.ipynb"
    nbformat.write(nbs.load(TOY), src)
    with pytest.raises(PapermillExecutionError) as info:
        papermill.execute_notebook(str(src), str(tmp_path / "out.ipynb"), parameters={"sacle": 2.0},
                                   kernel_name="python3", progress_bar=False)
    assert info.value.ename == "ParameterError"
    assert "'sacle': is not a parameter of this notebook (did you mean 'scale'?)" in info.value.evalue


@pytest.mark.slow
def test_the_kernels_event_loop_logs_nothing_onto_the_runs_stderr(tmp_path):
    """A run's stderr carries the notebook's own error in one line: the kernel's event loop (tornado), which may
    log a callback's traceback while papermill shuts the kernel down (a stream already closed), is silenced in every
    kernel the runner starts (``KERNEL_ARGUMENTS``). Here a cell logs such a record onto the process's own stderr."""
    toy = (FIXTURES / "toy.md").read_text()
    cell = ("```{code-cell} ipython3\nimport logging, sys\n"
            "logging.getLogger().addHandler(logging.StreamHandler(sys.__stderr__))\n"
            "try:\n    raise OSError('Stream is closed')\nexcept OSError:\n"
            "    logging.getLogger('tornado.application').error('Exception in callback', exc_info=True)\n```\n\n")
    anchor = "```{code-cell} ipython3\nimport numpy as np"
    assert anchor in toy  # else the logging cell would not be there and the test could not fail
    nb = tmp_path / "toy.md"
    nb.write_text(toy.replace(anchor, cell + anchor, 1))
    proc = run_cli("run", str(nb), "-p", "n", "200", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Stream is closed" not in proc.stderr, proc.stderr
