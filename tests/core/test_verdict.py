"""The verdict machinery: kinds, falsifiers, statuses, manifests. Each comparison must fail when the
measurement moves by twice its tolerance."""

import json
import math

import pytest

from companion.claims import ClaimSpec, ResultSpec
from companion.stats import POWER, Z_LEVEL, critical, detectable
from companion.verdict import KINDS, MAX_CRIT, Verdict, VerdictError, result_of


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
    ("qualitative", dict(predicted=0.0, comparison="lower", tolerance=0.0, falsifier="no effect", falsifier_value=0.0),
     0.3, -1),
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
    assert close.status == "not_resolvable" and close.in_band and not close.passed  # no power: never a silent pass
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


# ------------------------------------------------------------------------ targets from the result's CLAIMS
TOY_RESULT = ResultSpec(
    paper="toy", number="Theorem 1", title="toy", label="toy-thm-1", notebook="toy/thm1", module="toy.thm1",
    claims=(ClaimSpec("ab_{law}", "statistical", "trained", headline=True, falsifier="c*(inf)"),
            ClaimSpec("exact", "numerics", "closed_form"),
            ClaimSpec("gd_{T:num}", "statistical", "reduced", falsifier="1/5")))


def toy(tmp_path, manifest):
    return Verdict("toy/thm1", manifest=manifest, parameters={}, results_dir=tmp_path, result=TOY_RESULT)


def test_each_record_takes_its_target_from_the_spec_its_id_matches(tmp_path):
    v = toy(tmp_path, ["ab_sparse", "exact", "gd_10", "gd_1p5"])
    ab = v.statistical("ab_sparse", quantity="q", predicted=1.0, measured=1.0, se=0.01, falsifier="f",
                       falsifier_value=2.0, reason="r", headline=True)
    ex = v.numerics("exact", quantity="q", predicted=0.0, measured=0.0, tolerance=1e-12, reason="r")
    gd = v.statistical("gd_10", quantity="q", predicted=1.0, measured=1.0, se=0.01, falsifier="f",
                       falsifier_value=2.0, reason="r")
    na = v.not_applicable("gd_1p5", kind="statistical", quantity="q", reason="needs T >= 2")
    assert (ab.target, ex.target, gd.target, na.target) == ("trained", "closed_form", "reduced", "reduced")
    assert ab.headline and not gd.headline, "the notebook's headline flag is kept"
    v.finish(display=False)
    recs = [json.loads(x) for x in (tmp_path / "toy__thm1.jsonl").read_text().splitlines()]
    assert [r["target"] for r in recs] == ["trained", "closed_form", "reduced", "reduced"]


@pytest.mark.parametrize("call, message", [
    # an id that matches no spec ({T:num} takes a number only)
    (lambda v: v.numerics("gd_x", quantity="q", predicted=0, measured=0, tolerance=0, reason="r"),
     r"gd_x: matches no claim of toy\.thm1\.CLAIMS"),
    # the spec says statistical
    (lambda v: v.numerics("ab_gauss", quantity="q", predicted=0, measured=0, tolerance=0, reason="r"),
     r"ab_gauss: recorded as numerics, but toy\.thm1\.CLAIMS declares 'ab_\{law\}' statistical"),
    (lambda v: v.not_applicable("exact", kind="bound", quantity="q", reason="r"),
     "exact: recorded as bound, but .* declares 'exact' numerics"),
    # a headline the manifest does not declare
    (lambda v: v.statistical("gd_5", quantity="q", predicted=1.0, measured=1.0, se=0.01, falsifier="f",
                             falsifier_value=2.0, reason="r", headline=True),
     "gd_5: recorded as a headline, but .* does not make 'gd_\\{T:num\\}' one"),
])
def test_a_claim_its_result_does_not_declare_fails_the_notebook_in_one_line(tmp_path, call, message):
    v = toy(tmp_path, ["gd_x", "ab_gauss", "exact", "gd_5"])
    rec = call(v)
    v.manifest = [rec.claim]  # declared: only the spec check can fail it
    assert rec.status != "failed" and not v.ok
    with pytest.raises(VerdictError, match=message) as err:
        v.finish(display=False)
    assert len([ln for ln in str(err.value).splitlines()[1:] if rec.claim in ln]) == 1


def test_the_result_of_a_notebook_comes_from_its_papers_registry(tmp_path):
    spec = result_of("mesa/thm4_3_masking")
    assert spec.module == "companion.mesa.results.thm4_3" and result_of("paper/nb") is None
    with pytest.raises(KeyError, match="no result of companion.cot.results"):
        result_of("cot/no_such_page")
    v = Verdict("mesa/thm4_3_masking", manifest=["ab_masked"], parameters={}, results_dir="")
    rec = v.statistical("ab_masked", quantity="q", predicted=0.5, measured=0.5, se=0.01, falsifier="f",
                        falsifier_value=1.0, reason="r")
    assert rec.target == spec.spec_of("ab_masked").target == "trained"


# ------------------------------------------------------------------- crit <= 8, falsifiers with their values
def test_a_statistical_claim_passes_only_with_a_band_of_at_most_8_se(tmp_path):
    v = make(tmp_path, ["d7", "d8", "wide_fail", "wide_sep", "bound7"])
    kw = dict(quantity="q", predicted=0.0, se=0.01, z=4, falsifier="f", falsifier_value=1.0, reason="r")
    assert critical(4, 7) > MAX_CRIT > critical(4, 8)
    d7 = v.statistical("d7", measured=0.01, dof=7, **kw)  # falsifier 99 SE away, band 8.47 SE
    assert d7.status == "not_resolvable" and d7.in_band and not d7.passed and "band is 8.47 SE" in d7.note
    d8 = v.statistical("d8", measured=0.01, dof=8, **kw)
    assert d8.status == "passed" and d8.note is None
    # a theory the data reject still fails, however wide the band
    assert v.statistical("wide_fail", measured=2.0, dof=2, **kw).status == "failed"  # 200 SE, band 125.6
    assert v.statistical("wide_sep", measured=0.0, **dict(kw, z=9)).status == "not_resolvable"  # z itself above 8
    # the rule is the statistical kind's: a bound with few dof is judged by its band alone
    b = v.bound("bound7", quantity="q", bound=1.0, measured=0.9, comparison="upper", se=0.01, dof=7, reason="r")
    assert b.status == "passed"


def test_a_falsifier_without_a_value_is_never_rejected(tmp_path):
    v = make(tmp_path, ["s", "q", "b", "plain"])
    s = v.statistical("s", quantity="q", predicted=0.0, measured=0.0, se=0.01, falsifier="c*(inf)", reason="r")
    assert s.status == "not_resolvable" and s.in_band and not s.passed and "falsifier has no value" in s.note
    q = v.qualitative("q", quantity="q", predicted=0.0, measured=5.0, comparison="lower", tolerance=0.0,
                      falsifier="no effect", reason="r")
    assert q.status == "not_resolvable" and q.falsifier_value is None
    b = v.bound("b", quantity="q", bound=1.0, measured=0.5, comparison="upper", tolerance=0.0, falsifier="f",
                reason="r")
    assert b.status == "not_resolvable"
    # a bound that names no falsifier has nothing to separate the theorem from: it passes
    plain = v.bound("plain", quantity="q", bound=1.0, measured=0.5, comparison="upper", tolerance=0.0, reason="r")
    assert plain.status == "passed" and plain.note is None
    # every statistical claim names its falsifier; a value needs a name
    with pytest.raises(ValueError, match="names its falsifier"):
        v.statistical("x", quantity="q", predicted=0, measured=0, se=1, falsifier="", reason="r")
    with pytest.raises(ValueError, match="falsifier value needs the falsifier's name"):
        v.bound("y", quantity="q", bound=1.0, measured=0.5, comparison="upper", tolerance=0.0, falsifier_value=2.0,
                reason="r")


def test_an_undecided_reason_leaves_a_pass_and_a_miss_alike_not_resolvable(tmp_path):
    """``undecided`` (a rule fixed before the comparison, e.g. a training run still improving when it stopped): a
    bound that would fail and one that would hold are both not_resolvable with the reason as their note, their
    ``in_band`` saying what the comparison gave; without a reason the comparison decides; no empty reasons."""
    v = make(tmp_path, manifest=("above", "below", "plain", "empty"))
    why = "training had not converged: the error fell 0.1 +- 0.01 over the last fifth of its steps"
    above = v.bound("above", quantity="q", bound=1.0, measured=1.5, comparison="upper", reason="r", se=0.01,
                    falsifier="the floor", falsifier_value=1.0, undecided=why)
    assert above.status == "not_resolvable" and above.note == why and not above.in_band and not above.passed
    below = v.bound("below", quantity="q", bound=1.0, measured=0.5, comparison="upper", reason="r", se=0.01,
                    falsifier="the floor", falsifier_value=1.0, undecided=why)
    assert below.status == "not_resolvable" and below.note == why and below.in_band and not below.passed
    plain = v.bound("plain", quantity="q", bound=1.0, measured=1.5, comparison="upper", reason="r", se=0.01,
                    falsifier="the floor", falsifier_value=1.0)
    assert plain.status == "failed"
    with pytest.raises(ValueError, match="undecided"):
        v.bound("empty", quantity="q", bound=1.0, measured=1.5, comparison="upper", reason="r", se=0.01,
                falsifier="the floor", falsifier_value=1.0, undecided=" ")


def test_a_sign_test_without_the_power_to_find_the_predicted_effect_is_undecided_hit_or_miss(tmp_path):
    """A qualitative sign claim takes the same ``undecided`` reason (Thm 4.3's ``unmasked_lower_*``: at a held-out
    seed of its smoke point the predicted gap was under twice the level's SE of the paired test, and the sign test
    missed it): a miss and a hit are both not_resolvable with the reason."""
    v = make(tmp_path, manifest=("miss", "hit"))
    why = "the predicted gap -3.7 is less than 8 SE (7.5) below 0"
    miss = v.qualitative("miss", quantity="q", predicted=-3.75, measured=-3.0, comparison="upper", tolerance=0.0,
                         falsifier="no gap", falsifier_value=0.0, reason="r", undecided=why)
    assert miss.status == "not_resolvable" and miss.note == why and not miss.in_band and not miss.passed
    hit = v.qualitative("hit", quantity="q", predicted=-3.75, measured=-5.0, comparison="upper", tolerance=0.0,
                        falsifier="no gap", falsifier_value=0.0, reason="r", undecided=why)
    assert hit.status == "not_resolvable" and hit.note == why and hit.in_band and not hit.passed


def test_a_claim_left_undecided_without_a_rule_in_its_manifest_line_is_a_problem(tmp_path):
    """The rule behind ``undecided`` is declared before the run (``ClaimSpec.undecided``): a claim whose manifest
    line declares none and that is left undecided anyway is a spec problem, which ``finish`` reports."""
    ruled = ClaimSpec("ruled", "qualitative", "monte_carlo", falsifier="f", undecided="a design rule in words")
    bare = ClaimSpec("bare", "qualitative", "monte_carlo", falsifier="f")
    res = ResultSpec(paper="toy", number="Theorem 2", title="t", label="toy-thm-2", notebook="toy/thm2",
                     module="toy.thm2", claims=(ruled, bare))
    v = Verdict("toy/thm2", manifest=["ruled", "bare"], parameters={}, results_dir=tmp_path, result=res)
    kw = dict(quantity="q", predicted=0.0, measured=-1.0, comparison="upper", tolerance=0.0, falsifier="f",
              falsifier_value=1.0, reason="r", undecided="measured: too little power")
    v.qualitative("ruled", **kw)
    assert v.spec_problems == []
    v.qualitative("bare", **kw)
    assert len(v.spec_problems) == 1 and "bare" in v.spec_problems[0] and "no `undecided`" in v.spec_problems[0]


def test_a_statistical_record_carries_its_signed_z_and_the_deviation_it_detects(tmp_path):
    """``z_score`` is (measured - predicted) / se with its sign (what calibration collects); ``detectable`` is
    (crit + q_0.99) se + floor, with the normal quantile, or the Student-t one at the record's dof; ``powered``
    says whether the falsifier lies that far from the prediction; ``passed`` is the verdict, ``in_band`` the band."""
    from scipy import stats as st

    v = make(tmp_path, manifest=("lo", "t", "near"))
    lo = v.statistical("lo", quantity="q", predicted=1.0, measured=0.98, se=0.01, falsifier="f",
                       falsifier_value=1.2, reason="r", floor=0.001)
    assert lo.z_score == pytest.approx(-2.0)
    assert lo.detectable == pytest.approx((Z_LEVEL + st.norm.ppf(POWER)) * 0.01 + 0.001) and lo.powered
    t = v.statistical("t", quantity="q", predicted=1.0, measured=1.01, se=0.01, falsifier="f", falsifier_value=1.2,
                      reason="r", dof=9)
    assert t.z_score == pytest.approx(1.0)
    assert t.detectable == pytest.approx((critical(Z_LEVEL, 9) + st.t.ppf(POWER, 9)) * 0.01)
    near = v.statistical("near", quantity="q", predicted=1.0, measured=1.0, se=0.01, falsifier="f",
                         falsifier_value=1.05, reason="r")
    # 5 SE from the measurement, but a truth at the falsifier would stay inside the band in 1 run of 8: not powered,
    # so not rejected
    assert near.status == "not_resolvable" and not near.passed and near.in_band and near.powered is False
    assert "nearer than the" in near.note and "cannot separate them" in near.note


def test_a_statistical_falsifier_is_rejected_by_the_design_not_by_the_measurement(tmp_path):
    """Whether a statistical claim's falsifier is rejected is its power (:func:`companion.stats.detectable` from the
    prediction), fixed before the comparison: an in-band measurement close to the falsifier still passes when the
    design has power, one at the prediction stays undecided when it has none, and a miss fails either way."""
    v = make(tmp_path, manifest=("edge", "centre", "miss", "miss_weak"))
    se = 0.01
    kw = dict(quantity="q", predicted=1.0, se=se, falsifier="f", reason="r")
    det = detectable(Z_LEVEL, se)  # (c + q_0.99) SE, about 6.3 SE at the book's level
    # the falsifier just beyond what the band detects; a measurement 0.9 band towards it lies nearer to it than the
    # band's half-width (a data rule would not reject it), and passes
    far = 1.0 + 1.03 * det
    near_edge = 1.0 + 0.9 * Z_LEVEL * se
    assert far - near_edge < Z_LEVEL * se
    edge = v.statistical("edge", measured=near_edge, falsifier_value=far, **kw)
    assert edge.powered and edge.in_band and edge.status == "passed"
    centre = v.statistical("centre", measured=1.0, falsifier_value=1.0 + 0.95 * det, **kw)
    assert centre.powered is False and centre.status == "not_resolvable"
    out = 1.0 + 1.5 * Z_LEVEL * se
    assert v.statistical("miss", measured=out, falsifier_value=1.5, **kw).status == "failed"
    assert v.statistical("miss_weak", measured=out, falsifier_value=1.0 + 0.95 * det, **kw).status == "failed"


def test_a_miss_of_a_statement_that_may_not_hold_is_a_finding_that_does_not_fail_the_build(tmp_path):
    """``ClaimSpec.may_not_hold`` (the paper's statement tested as stated where the book may find it does not hold,
    Fig. 5's "same test performance"): a miss is ``does_not_hold`` with the rule as its note, written and counted, and
    ``finish`` does not raise; a pass is a pass; the same miss of a claim without the rule fails; the rule is refused
    on a supporting claim."""
    stated = ClaimSpec("stated", "statistical", "trained", falsifier="f", may_not_hold="the caption at finite size")
    plain = ClaimSpec("plain", "statistical", "trained", falsifier="f")
    res = ResultSpec(paper="toy", number="Figure 5", title="t", label="toy-fig-5", notebook="toy/fig5",
                     module="toy.fig5", claims=(stated, plain))
    kw = dict(quantity="q", predicted=0.0, se=0.1, z=4.0, falsifier="f", falsifier_value=10.0, reason="r")
    v = Verdict("toy/fig5", manifest=["stated"], parameters={}, results_dir=tmp_path, result=res)
    miss = v.statistical("stated", measured=2.4, **kw)
    assert miss.status == "does_not_hold" and miss.note == "the caption at finite size"
    assert not miss.passed and not miss.in_band and v.ok
    v.finish(display=False)  # a finding, not a failure: nothing raised
    assert '"does_not_hold"' in (tmp_path / "toy__fig5.jsonl").read_text()
    held = Verdict("toy/fig5", manifest=["stated"], parameters={}, results_dir=None, result=res)
    assert held.statistical("stated", measured=0.1, **kw).status == "passed"
    bare = Verdict("toy/fig5", manifest=["plain"], parameters={}, results_dir=None, result=res)
    assert bare.statistical("plain", measured=2.4, **kw).status == "failed" and not bare.ok
    with pytest.raises(VerdictError, match="plain"):
        bare.finish(display=False)
    with pytest.raises(ValueError, match="may_not_hold"):
        ClaimSpec("s", "statistical", "trained", supporting="a repeat", may_not_hold="rule")
