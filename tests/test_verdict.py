"""The verdict machinery: kinds, falsifiers, statuses, manifests. Each comparison must fail when the
measurement moves by twice its tolerance."""

import json
import math

import pytest

from companion.verdict import KINDS, Verdict, VerdictError


def make(tmp_path, manifest=("a",)):
    return Verdict("paper/nb", manifest=list(manifest), parameters={"d": 3, "Ts": [5, 10]}, results_dir=tmp_path)


CASES = [  # (method, kwargs without measured, a passing measured value, the signed direction that must fail)
    ("identity", dict(predicted=1.0, tolerance=1e-12), 1.0, +1),
    ("identity", dict(predicted=2.0, tolerance=1e-12, comparison="rel"), 2.0, -1),
    ("numerics", dict(predicted=1.0, tolerance=1e-7), 1.0 + 5e-8, +1),
    ("statistical", dict(predicted=1.0, se=0.01, falsifier="f", falsifier_value=2.0), 1.02, +1),
    ("statistical", dict(predicted=1.0, se=0.01, falsifier="f", falsifier_value=2.0), 0.98, -1),
    ("statistical", dict(predicted=1.0, se=0.01, falsifier="f", falsifier_value=0.0, comparison="upper"), 0.5, +1),
    ("bound", dict(bound=1.0, comparison="upper", tolerance=1e-12), 0.9, +1),
    ("bound", dict(bound=1.0, comparison="lower", se=0.1, z=3), 1.2, -1),
    ("qualitative", dict(predicted=0.0, comparison="lower", tolerance=0.0, falsifier="no effect"), 0.3, -1),
]


@pytest.mark.parametrize("method, kw, good, sign", CASES)
def test_each_kind_passes_then_fails_two_tolerances_away(tmp_path, method, kw, good, sign):
    v = make(tmp_path, ["ok", "bad"])
    rec = getattr(v, method)("ok", quantity="q", measured=good, reason="r", **kw)
    assert rec.status == "passed" and rec.passed, rec
    tol = rec.tolerance * (abs(rec.predicted) if rec.comparison == "rel" else 1.0)
    moved = rec.predicted + sign * 2 * max(tol, 1e-300) + (sign * 1e-9 if tol == 0 else 0.0)
    bad = getattr(v, method)("bad", quantity="q", measured=moved, reason="r", **kw)
    assert bad.status == "failed" and not bad.passed, bad
    with pytest.raises(VerdictError, match="1 of 2"):
        v.finish(display=False)


def test_falsifier_rules_statistical_status(tmp_path):
    v = make(tmp_path, ["sep", "close", "wrong"])
    sep = v.statistical("sep", quantity="q", predicted=0.25, measured=0.251, se=0.002, z=4,
                        falsifier="1/5", falsifier_value=0.2, reason="r")
    assert sep.status == "passed"
    assert sep.z_theory == pytest.approx(0.5) and sep.z_falsifier == pytest.approx(25.5)
    close = v.statistical("close", quantity="q", predicted=0.208, measured=0.206, se=0.003, z=4,
                          falsifier="1/5", falsifier_value=0.2, reason="r")
    assert close.status == "not_resolvable" and close.passed  # no power: never a silent pass
    wrong = v.statistical("wrong", quantity="q", predicted=0.25, measured=0.2, se=0.002, z=4,
                          falsifier="1/5", falsifier_value=0.2, reason="r")
    assert wrong.status == "failed"  # the falsifier fits, the theory does not


def test_floor_adds_to_z_se(tmp_path):
    v = make(tmp_path)
    rec = v.statistical("a", quantity="q", predicted=0.0, measured=1e-13, se=0.0, z=4, floor=1e-12,
                        falsifier="f", falsifier_value=1.0, reason="round-off floor")
    assert rec.tolerance == pytest.approx(1e-12) and rec.status == "passed"


def test_records_and_manifest_round_trip(tmp_path):
    v = make(tmp_path, ["ok", "na"])
    v.numerics("ok", quantity="q", predicted=0.0, measured=1e-17, tolerance=1e-12, reason="round-off")
    v.not_applicable("na", kind="statistical", quantity="q", reason="needs T > 10")
    v.finish(display=False)
    recs = [json.loads(x) for x in (tmp_path / "paper__nb.jsonl").read_text().splitlines()]
    assert [r["status"] for r in recs] == ["passed", "not_applicable"]
    assert recs[0]["parameters"] == {"d": 3, "Ts": [5, 10]} and recs[0]["kind"] == "numerics"
    assert recs[1]["reason"] == "needs T > 10" and recs[1]["measured"] is None


def test_manifest_catches_missing_and_undeclared_claims(tmp_path):
    v = make(tmp_path, ["a", "b"])
    v.numerics("a", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    with pytest.raises(VerdictError, match="b: declared but not recorded"):
        v.finish(display=False)
    v = make(tmp_path, ["a"])
    v.numerics("a", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    v.numerics("z", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    with pytest.raises(VerdictError, match="z: recorded but not declared"):
        v.finish(display=False)


def test_misuse_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="declares no claim"):
        Verdict("paper/nb", manifest=[], parameters={})
    v = make(tmp_path, ["x"])
    with pytest.raises(VerdictError, match="no claim"):
        v.finish(display=False)
    with pytest.raises(ValueError, match="identifier"):
        v.numerics("not an id", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    with pytest.raises(ValueError, match="reason"):
        v.numerics("x", quantity="q", predicted=0, measured=0, tolerance=0, reason=" ")
    with pytest.raises(ValueError, match="comparison"):
        v.numerics("x", quantity="q", predicted=0, measured=0, tolerance=0, comparison="close", reason="r")
    with pytest.raises(ValueError, match="falsifier"):
        v.statistical("x", quantity="q", predicted=0, measured=0, se=1, falsifier="", falsifier_value=1, reason="r")
    with pytest.raises(ValueError, match="relative"):
        v.check("x", kind="statistical", quantity="q", predicted=1, measured=1, tolerance=0.1, comparison="rel",
                reason="r")
    with pytest.raises(ValueError, match="kind"):
        v.check("x", kind="plausible", quantity="q", predicted=1, measured=1, tolerance=0.1, reason="r")
    with pytest.raises(ValueError, match="alternative"):
        v.qualitative("x", quantity="q", predicted=0, measured=1, comparison="lower", tolerance=0, falsifier="",
                      reason="r")
    v.numerics("x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    with pytest.raises(ValueError, match="twice"):
        v.numerics("x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    assert set(KINDS) == {"identity", "numerics", "statistical", "bound", "qualitative"}


def test_nan_never_passes(tmp_path):
    v = make(tmp_path)
    assert v.numerics("a", quantity="q", predicted=1.0, measured=math.nan, tolerance=10, reason="r").status == "failed"


def test_no_results_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPANION_RESULTS_DIR", raising=False)
    v = Verdict("paper/nb", manifest=["x"], parameters={})
    v.numerics("x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r")
    assert v.write() is None


def test_parameters_default_to_the_notebooks_parameters_cell():
    # a notebook's cells run in one global namespace; Verdict reads the parameter values from it
    ns = {"Verdict": Verdict, "seed": 3, "results_dir": "", "d": 4, "unrelated": 1}
    exec('v = Verdict("cot/setup", manifest=["x"])', ns)
    v = ns["v"]
    assert v.parameters["seed"] == 3 and v.parameters["d"] == 4 and "unrelated" not in v.parameters


def test_degrees_of_freedom_widen_the_tolerance_to_the_same_level(tmp_path):
    from companion.stats import critical

    v = make(tmp_path, ["t", "n", "b"])
    # 3 replicates (2 dof): 6 SE from the theory is inside the t band (125.6 SE at z = 4), the falsifier too
    t = v.statistical("t", quantity="q", predicted=0.0, measured=0.06, se=0.01, z=4, dof=2,
                      falsifier="f", falsifier_value=1.0, reason="r")
    assert t.tolerance == pytest.approx(critical(4, 2) * 0.01) and t.crit == pytest.approx(125.64, abs=0.01)
    assert t.dof == 2 and t.status == "not_resolvable"
    assert t.z_theory == pytest.approx(6.0) and t.z_falsifier == pytest.approx(94.0)
    n = v.statistical("n", quantity="q", predicted=0.0, measured=0.06, se=0.01, z=4, dof=float("inf"),
                      falsifier="f", falsifier_value=1.0, reason="r")
    assert n.status == "failed" and n.dof is None and n.crit == 4.0
    b = v.bound("b", quantity="q", bound=0.0, measured=0.3, comparison="upper", se=0.01, z=4, dof=4, reason="r")
    assert b.status == "failed" and b.tolerance == pytest.approx(critical(4, 4) * 0.01)
    with pytest.raises(ValueError, match="degrees of freedom"):
        v.statistical("x", quantity="q", predicted=0.0, measured=0.0, se=0.01, dof=0, falsifier="f",
                      falsifier_value=1.0, reason="r")


def test_band_words_agree_with_the_verdicts_band(tmp_path):
    """A reason's words for the band must say what the verdict did: Student-t where it kept the dof, normal where
    it dropped them as many (a Welch combination dominated by a test-set mean has ~1e14 degrees of freedom)."""
    from companion.stats import MANY_DOF, band_words

    v = make(tmp_path, ["a", "b", "c"])
    for claim, dof in (("a", 7.25), ("b", 2 * MANY_DOF), ("c", None)):
        r = v.statistical(claim, quantity="q", predicted=0.0, measured=0.0, se=0.01, dof=dof, falsifier="f",
                          falsifier_value=1.0, reason=band_words(dof))
        assert (r.dof is None) == r.reason.startswith("normal"), (claim, r.dof, r.reason)
    assert band_words(7.25) == "Student-t on 7.25 degrees of freedom"
