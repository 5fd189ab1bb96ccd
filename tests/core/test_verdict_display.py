"""What a reader sees of a verdict: the forest plot drawn from the records (it cannot disagree with the table),
the "In this book" answer, and words with typeset maths (no ASCII maths, reasons in two lines)."""

import base64
import math
import re

import pytest

from companion.claims import ClaimSpec, ResultSpec
from companion.plotting import FOREST_LIMIT, forest, forest_rows
from companion.report import answer_markdown, decisive_claim, forest_html, glance_markdown, verdict_table_html
from companion.stats import Z_LEVEL
from companion.text import ascii_math, math_html, plain_text, segments
from companion.verdict import REASON_MAX, Verdict

SPEC = ResultSpec(paper="paper", number="Theorem 9.9", title="t", label="paper-thm-9-9", notebook="paper/nb",
                  module="m", figures=("fig_paper_main",),
                  claims=(ClaimSpec("h", "statistical", "trained", headline=True), ClaimSpec("s{i}", "statistical", "trained"),
                          ClaimSpec("b", "bound", "trained"), ClaimSpec("lo", "bound", "trained"), ClaimSpec("n", "numerics", "closed_form")))


def _verdict(tmp_path):
    v = Verdict("paper/nb", manifest=["h", "s1", "s2", "s3", "b", "lo", "n"], parameters={}, results_dir=tmp_path,
                result=SPEC)
    v.statistical("h", quantity="the trained $ab$", predicted=0.2, measured=0.203, se=0.002, falsifier="the $T\\to\\infty$ constant",
                  falsifier_value=0.25, reason="4 SE of replicates", headline=True, detail="Welch, 9 dof")
    v.statistical("s1", quantity="q", predicted=1.0, measured=1.05, se=0.01, falsifier="f", falsifier_value=1.2,
                  reason="r")  # fails: 5 SE from the prediction
    v.statistical("s2", quantity="q", predicted=1.0, measured=1.01, se=0.01, falsifier="f", falsifier_value=1.02,
                  reason="r")  # the falsifier inside the band: not resolvable
    v.statistical("s3", quantity="q", predicted=1.0, measured=0.99, se=0.01, falsifier="f", falsifier_value=1e6,
                  reason="r")  # the falsifier far beyond the axis
    v.bound("b", quantity="q", bound=1.0, measured=0.5, comparison="upper", se=0.05, reason="r")  # far below: passes
    v.bound("lo", quantity="q", bound=1.0, measured=0.5, comparison="lower", se=0.05, reason="r")  # fails
    v.numerics("n", quantity="q", predicted=1.0, measured=1.0, tolerance=1e-9, reason="r")
    return v


def _records(v):
    return [r.__dict__ for r in v.records]


def test_forest_rows_put_each_claim_where_its_status_says(tmp_path):
    """In band half-widths from the prediction: a passed claim's band covers 0 and not the falsifier, a failed
    one's misses 0, a not-resolvable one's covers both; the headline first; numerics claims have no row."""
    v = _verdict(tmp_path)
    status = {r.claim: r.status for r in v.records}
    assert status == {"h": "passed", "s1": "failed", "s2": "not_resolvable", "s3": "passed", "b": "passed",
                      "lo": "failed", "n": "passed"}
    rows = forest_rows(_records(v))
    assert [r["claim"] for r in rows] == ["h", "s1", "s2", "s3", "b", "lo"]
    for row in rows:
        rec = next(r for r in v.records if r.claim == row["claim"])
        assert (row["lo"] <= 0 <= row["hi"]) == (rec.status != "failed"), row
        assert math.isclose(row["measured"], (rec.measured - rec.predicted) / rec.tolerance)
        if row["falsifier"] is not None and rec.status != "failed":
            assert (abs(row["measured"] - row["falsifier"]) > 1) == (rec.status == "passed"), row
    assert rows[3]["falsifier"] > FOREST_LIMIT  # drawn as a triangle at the edge


def test_the_forest_plot_draws_every_row_with_its_status_marker(tmp_path):
    fig = forest(_records(_verdict(tmp_path)))
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "★ h" in texts and all(c in texts for c in ("s1", "s2", "s3", "b")), texts
    markers = [ln.get_marker() for ln in ax.lines]
    assert markers.count("o") == 3 and markers.count("s") == 2 and markers.count("D") == 1, markers
    assert ">" in markers, "a falsifier beyond the axis is a triangle at the edge"
    assert any(t == f"± {Z_LEVEL:.1f} SE" for t in texts) and any(t.startswith("≤ ") for t in texts), texts
    assert forest([r for r in _records(_verdict(tmp_path)) if r["kind"] == "numerics"]) is None


def test_the_forest_html_embeds_the_plot_with_alt_text_and_a_caption(tmp_path):
    html = forest_html(_records(_verdict(tmp_path)))
    assert html.startswith("<figure class='cv-forest'>") and "\n\n" not in html
    svg = base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", html).group(1)).decode()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    alt = re.search(r"alt='([^']*)'", html).group(1)
    assert all(w in alt for w in ("h passed", "s1 FAILED", "s2 not resolvable")), alt
    assert "<figcaption>" in html
    assert forest_html(_records(_verdict(tmp_path))) == html and "<dc:date>" not in svg  # no build date: each build the same


def test_the_verdict_cell_shows_the_plot_above_the_table(tmp_path):
    v = _verdict(tmp_path)
    rendered = forest_html(_records(v)) + v.table_markdown()
    assert rendered.index("cv-forest") < rendered.index("cv-table")


def test_the_answer_names_the_headline_with_its_numbers_and_links(tmp_path):
    v = _verdict(tmp_path)
    text = answer_markdown(SPEC, _records(v))
    assert text.startswith("Headline claim `h` (statistical on a trained transformer)"), text
    assert "`h`" in text and "0.203 ± 0.002" in text and "0.25" in text and "**passed**" in text, text
    assert "1.5 SE away" in text and "23.5 SE away" in text, text  # |0.203-0.2|/0.002, |0.203-0.25|/0.002
    assert "(#fig-paper-main)" in text and "(#verdict-paper-nb)" in text, text
    assert "the $T\\to\\infty$ constant" in text
    assert v.answer_markdown() == text


def test_a_statement_that_does_not_hold_is_shown_as_a_finding_everywhere(tmp_path):
    """A miss of a claim whose spec declares ``may_not_hold`` (Fig. 5's caption on the full models): the answer says
    the paper's statement does not hold here and gives the rule; the table's badge and the forest plot's marker have
    their own colour and words; the build's verdict is still ok."""
    spec = ResultSpec(paper="paper", number="Figure 5", title="t", label="paper-fig-5", notebook="paper/fig5", module="m",
                      claims=(ClaimSpec("same", "statistical", "trained", headline=True, falsifier="f",
                                        may_not_hold="the caption at the page's epochs"),))
    v = Verdict("paper/fig5", manifest=["same"], parameters={}, results_dir=tmp_path, result=spec)
    v.statistical("same", quantity="the paired test loss", predicted=0.0, measured=2.3, se=0.09, falsifier="f",
                  falsifier_value=140.0, reason="4 SE of test sequences", headline=True)
    assert v.ok
    text = answer_markdown(spec, _records(v))
    assert "**does not hold here**" in text and "a finding of the book" in text, text
    assert "the caption at the page's epochs" in text, text
    table = verdict_table_html(_records(v))
    assert "cv-badge cv-does_not_hold'>does not hold<" in table, table
    assert "<b>Does not hold:</b> the caption at the page" in table, table
    rows = forest_rows(_records(v))
    assert [r["status"] for r in rows] == ["does_not_hold"]
    fig = forest(_records(v))
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "does not hold" in labels, labels
    # beside a passed headline that decides nothing (its falsifier far away), the finding is the one shown
    passed = dict(_records(v)[0], claim="same2", status="passed", passed=True, measured=0.01, in_band=True)
    assert decisive_claim([passed, _records(v)[0]])[0]["claim"] == "same"
    assert "does not hold at these parameters: a finding" in glance_markdown([spec], [passed, _records(v)[0]])


def test_the_glance_page_draws_one_forest_row_per_result(tmp_path):
    recs = _records(_verdict(tmp_path))
    md = glance_markdown([SPEC], recs)
    assert md.count("<figure class='cv-forest cv-forest-glance'>") == 1
    assert "Theorem 9.9: h" in re.search(r"alt='([^']*)'", md).group(1)


def test_the_detail_is_recorded_and_folded_under_the_reason(tmp_path):
    v = _verdict(tmp_path)
    assert v.records[0].detail == "Welch, 9 dof" and v.records[1].detail is None
    table = verdict_table_html(_records(v))
    assert "<details class='cv-detail'><summary>Method</summary>Welch, 9 dof</details>" in table


# ------------------------------------------------------------------------------------ words with maths
def test_maths_between_dollars_is_typeset_and_code_between_backticks_is_code():
    assert segments("a $x<1$ b `c_d` e") == [("text", "a "), ("math", "x<1"), ("text", " b "), ("code", "c_d"),
                                              ("text", " e")]
    html = math_html("a $x<1$ and `id` <b>")
    assert html == ('a <span class="math notranslate nohighlight">\\(x&lt;1\\)</span> and <code>id</code> &lt;b&gt;')
    assert plain_text("$T\\to\\infty$: $\\frac{1}{5\\sigma^2}$") == "T→∞: (1)/(5σ^2)"


@pytest.mark.parametrize("text", ["T -> infinity constant", "1/(5 sigma^2)", "m4/m6", "x_1 integrated", "sqrt(m)",
                                  "0.1 +- 0.01", "T = 100", "a <= b", "eta*lambda", "decay over m/4 -> m", "x^2"])
def test_ascii_maths_is_found(text):
    assert ascii_math(text), text


@pytest.mark.parametrize("text", ["$T\\to\\infty$ constant", "$1/(5\\sigma^2)$", "float64 round-off, DOP853",
                                  "4 SE of 16 replicate training sets, Student-t on 9.5 degrees of freedom",
                                  "Fig. 1a at `ab_gaussian_1`", "complex64 and float32", "the law's 99 % quantile"])
def test_typeset_words_pass(text):
    assert ascii_math(text) == [], ascii_math(text)


def test_the_words_check_of_the_notebook_runs_refuses_a_long_reason_and_ascii_maths():
    """tests/notebooks/test_notebooks.py checks every record of every smoke and domain run with this rule."""
    from _util import word_problems

    ok = {"claim": "c", "quantity": "the trained $ab$", "reason": "4 SE of replicates", "falsifier": "$1/5$"}
    assert word_problems(ok) == []
    assert word_problems(dict(ok, reason="x" * (REASON_MAX + 1)))
    assert word_problems(dict(ok, falsifier="T -> infinity constant 1/5"))
    assert word_problems(dict(ok, detail="Welch dof, m4 and m6 control variates"))


def test_every_declared_falsifier_is_typeset():
    """The falsifiers of every result's CLAIMS manifest (shown on "Where is each result") typeset their maths."""
    from companion.site.book import all_results

    bad = [(s.notebook, c.id, c.falsifier) for s in all_results() for c in s.claims if ascii_math(c.falsifier)]
    assert not bad, bad


def test_the_answer_names_every_target_in_words():
    from companion.claims import TARGETS
    from companion.report import _TARGET_WORDS

    assert set(_TARGET_WORDS) == set(TARGETS)


def test_supporting_claims_are_not_evidence_and_one_experiment_counts_once(tmp_path):
    """A supporting claim is decided and shown (marked, with its reason) but not counted as evidence and never
    decides a result; claims that name one experiment count as one experiment, on the "Every claim" page and among
    the decisive claims of "Results at a glance"."""
    from companion.report import counts, dashboard_markdown, decisive_claim, experiments

    shared = "the ten models"
    spec = lambda nb, num: ResultSpec(  # noqa: E731
        paper="paper", number=num, title="t", label=f"paper-{nb}", notebook=f"paper/{nb}", module="m",
        claims=(ClaimSpec("h", "statistical", "trained", headline=True, experiment=shared),
                ClaimSpec("s", "statistical", "monte_carlo", supporting="two samples of one law: a sampler check"),
                ClaimSpec("o", "statistical", "trained")))
    recs = []
    for nb, num in (("a", "Theorem 1"), ("b", "Theorem 2")):
        v = Verdict(f"paper/{nb}", manifest=["h", "s", "o"], parameters={}, results_dir=tmp_path, result=spec(nb, num))
        v.statistical("h", quantity="q", predicted=1.0, measured=1.001, se=0.001, falsifier="f", falsifier_value=1.3,
                      reason="r", headline=True)
        v.statistical("s", quantity="q", predicted=1.0, measured=1.0, se=0.001, falsifier="f", falsifier_value=1.1,
                      reason="r")
        v.statistical("o", quantity="q", predicted=1.0, measured=1.0, se=0.001, falsifier="f", falsifier_value=1.1,
                      reason="r")
        recs += _records(v)
    assert [r["supporting"] for r in recs[:3]] == [None, "two samples of one law: a sampler check", None]
    assert recs[0]["experiment"] == shared and recs[2]["experiment"] is None
    c = counts(recs)
    assert (c["evidence"], c["supporting"], c["experiments"]) == (4, 2, 3)  # h+h one experiment, o and o two more
    assert experiments(recs) == 3
    # without a headline the best evidence decides, never the supporting claim
    assert decisive_claim([r for r in recs[:3] if r["claim"] != "h"])[0]["claim"] == "o"
    page = dashboard_markdown(["paper/a", "paper/b"], recs, [])
    assert "4 claims are evidence for the papers; counting the claims that read the same trained models" in page
    assert "once, 3 independent ones" in page
    assert page.count("class='cv-supporting'") == 2 and "a sampler check" in page
    glance = glance_markdown([spec("a", "Theorem 1"), spec("b", "Theorem 2")], recs)
    assert "They come from 1 independent experiment; Theorem 1 (paper) and Theorem 2 (paper) read one experiment" \
        in glance, glance[:800]


def test_the_every_claim_page_counts_the_claims_decided_at_the_level_against_the_budget():
    from companion.report import banded, budget_words
    from companion.stats import BUILD_CLAIMS, BUILD_FALSE_FAIL, false_alarm

    recs = [{"kind": "statistical", "se": 0.1, "status": "passed"}, {"kind": "statistical", "status": "not_applicable"},
            {"kind": "bound", "se": 0.1, "status": "passed"}, {"kind": "bound", "se": None, "status": "passed"},
            {"kind": "qualitative", "status": "not_resolvable"}, {"kind": "identity", "status": "passed"}]
    assert [banded(r) for r in recs] == [True, False, True, False, True, False]
    text = budget_words(recs)
    assert text.startswith("3 claims were decided") and f"{100 * 3 * false_alarm(Z_LEVEL):.2g} %" in text, text
    assert f"{100 * BUILD_FALSE_FAIL:g} %" in text and f"at most {BUILD_CLAIMS} such claims" in text
    assert "more than the budget" not in text and "more than the budget" in budget_words(recs[:1] * (BUILD_CLAIMS + 1))
