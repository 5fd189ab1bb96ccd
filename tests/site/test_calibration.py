"""The calibration of the statistical claims (companion.calibration, companion.run.calibrate, the Calibration page):
the committed set covers every statistical claim, is current, and keeps every entry inside the limits or lists it
as an open defect; the statistics it reports are right on synthetic scores."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from companion import calibration as cal
from companion.site import calibration_page as page

from _util import one_worker_scheduler, run_cli


def _data(z, dof=None, status=None, notebook="mesa/setup", point="smoke", claim="c"):
    n = len(z)
    seeds = list(range(1000, 1000 + n))
    return {"notebook": notebook, "point": point, "code_version": "v", "seeds": seeds,
            "failed_seeds": [x for x, s in zip(seeds, status or []) if s == "failed"],
            "claims": {claim: {"z": [float(x) for x in z], "dof": [dof] * n,
                               "status": status or ["passed"] * n, "crit": [4.0] * n}}}


@pytest.fixture(scope="module")
def committed():
    return page.summaries()


# ------------------------------------------------------------------------------- the committed set
def test_every_statistical_claim_of_the_registries_has_a_calibration_entry(committed):
    """... or is listed in calibration/open.yaml (not_calibrated) with the reason; a listed claim that has an entry
    now must leave the list."""
    assert committed, "no calibration file is committed: run `make calibrate`"
    missing = set(page.uncalibrated(committed))
    listed = set(page.not_calibrated())
    assert not missing - listed, f"statistical claims without a calibration entry: {sorted(missing - listed)}"
    assert not listed - missing, f"listed as not calibrated but calibrated now: {sorted(listed - missing)}"


def test_no_calibration_entry_is_stale(committed):
    stale = sorted({f"{s.notebook} {s.point}" for s in committed if s.stale})
    assert not stale, (f"the code of these notebooks' claims, or their points' parameters, changed since they were "
                       f"calibrated: {stale}; rerun "
                       "`companion calibrate NOTEBOOK --point POINT` for each (make calibrate: all)")


def test_entries_outside_the_limits_are_exactly_the_listed_open_defects(committed):
    """A new entry outside the limits fails; so does a listed one that is now inside them (take it off the list)."""
    outside = {page.key(s) for s in committed if not s.stale and s.problems()}
    listed = set(page.open_defects())
    assert not outside - listed, f"outside the limits and not in calibration/open.yaml: {sorted(outside - listed)}"
    assert not listed - outside, f"in calibration/open.yaml but inside the limits now: {sorted(listed - outside)}"


def test_the_causes_the_page_shows_type_no_measured_number(tmp_path):
    """A number in the book is computed: each open entry's cause is words (the page prints the entry's statistics
    beside it); an investigation's measurements stay in the entry's ``measured`` notes, which the page leaves out."""
    causes = page.open_defects()
    assert causes and all(causes.values())
    typed = {k: page.typed_numbers(v) for k, v in causes.items() if page.typed_numbers(v)}
    assert not typed, f"calibration/open.yaml: causes with typed numbers (move them to `measured`): {typed}"
    for text in ("z averages +0.87 ± 0.12", "24 of 80 replicates", "a floor of 7.5 SE", "54 % of it", "1e-5 of c",
                 "at m = 400"):
        assert page.typed_numbers(text), text
    for text in ("the 1/m law", "1/c²", "d(d+1)/(n+d+1)", "L_1, L_2, L_3", "-tr(V31 W13)/d", "init_b_0p5_1p5"):
        assert not page.typed_numbers(text), text
    (tmp_path / page.OPEN_FILE).write_text(
        'outside_limits:\n  "nb smoke c": {cause: "A cause.", measured: "z +4.64"}\n  "nb smoke d": Plain words.\n')
    assert page.open_defects(tmp_path) == {"nb smoke c": "A cause.", "nb smoke d": "Plain words."}


@pytest.mark.parametrize("text, words", [
    ('outside_limits:\n  "nb smoke c":\n    cause: A.\n  "nb smoke d":\n    cause: B.\n    measured: x\n    measured: y\n',
     "key 'measured' given twice in one mapping (line 7)"),
    ('outside_limits:\n  "nb smoke c": {cause: A.}\n  "nb smoke c": {cause: B.}\n', "key 'nb smoke c' given twice"),
    ('outside_limits:\n  "nb smoke c": {cause: A., measure: z}\n', "entry 'nb smoke c' has field(s) measure; allowed"),
])
def test_the_open_list_refuses_a_key_given_twice_or_an_unknown_field(tmp_path, text, words):
    """An entry typed into the middle of another once took that entry's ``measured`` for its own: YAML keeps the
    last of two equal keys without a word. The open list refuses that, and a misspelt field, naming them."""
    (tmp_path / page.OPEN_FILE).write_text(text)
    with pytest.raises(ValueError, match=re.escape(words)):
        page.open_defects(tmp_path)

def test_every_calibration_file_is_complete_and_current_in_form(committed):
    for data in cal.read_all():
        n = len(data["seeds"])
        assert n >= (cal.SMOKE_SEEDS if data["point"] == "smoke" else cal.DOMAIN_SEEDS), (data["notebook"], data["point"], n)
        assert data["seeds"] == sorted(set(data["seeds"])) and min(data["seeds"]) >= cal.FIRST_SEED
        assert data["runs"]["error"] == 0, (data["notebook"], data["point"], data["runs"])
        # the failed page runs (a claim of any kind), each at a seed of the file
        assert len(data["failed_seeds"]) == data["runs"]["failed"] and set(data["failed_seeds"]) <= set(data["seeds"])
        for claim, col in data["claims"].items():
            assert {len(col[k]) for k in ("z", "dof", "status", "crit", "in_band", "floor_se")} == {n}, claim


def test_make_calibrate_runs_the_seeds_the_committed_set_must_hold():
    import re

    from companion.paths import repo_root

    recipe = (repo_root() / "Makefile").read_text().split("\ncalibrate:", 1)[1].split("\n\n", 1)[0]
    points = re.findall(r"companion calibrate all( --point domain)? --resume\n", recipe + "\n")
    assert sorted(points) == ["", " --point domain"], recipe  # the command's defaults:
    assert (cal.default_seeds("smoke"), cal.default_seeds("domain:1")) == (cal.SMOKE_SEEDS, cal.DOMAIN_SEEDS)
    # the committed files at the paper's settings: each notebook's own line
    paper = re.findall(r"companion calibrate (\S+) --point paper --resume\n", recipe + "\n")
    assert sorted(paper) == sorted(d["notebook"] for d in cal.read_all() if d["point"] == "paper"), recipe
    assert cal.default_seeds("paper") == cal.DOMAIN_SEEDS
    # the held-out check: its own line, the seeds its committed files hold, every smoke point
    held = re.findall(r"companion calibrate all --seeds (\d+) --first-seed (\d+) -o calibration/heldout --resume\n",
                      recipe + "\n")
    assert held == [(str(cal.HELDOUT_SEEDS), str(cal.HELDOUT_FIRST_SEED))], recipe
    assert len(re.findall("--seeds", recipe)) == 1, recipe
    files = cal.read_all(cal.calibration_dir() / "heldout")
    want = list(range(cal.HELDOUT_FIRST_SEED, cal.HELDOUT_FIRST_SEED + cal.HELDOUT_SEEDS))
    assert files and all(d["seeds"] == want and d["point"] == "smoke" for d in files)
    assert sorted(d["notebook"] for d in files) == sorted(d["notebook"] for d in cal.read_all() if d["point"] == "smoke")
    assert not set(want) & {x for d in cal.read_all() for x in d["seeds"]}  # held out: no committed file holds them


# ------------------------------------------------------------------------------- the statistics
def test_normal_scores_make_a_student_t_claim_pass_the_limits_that_its_raw_z_would_break():
    """At 4 dof a calibrated t statistic has rms sqrt(2) = 1.41 > 1.25: the limits apply to its normal scores."""
    rng = np.random.default_rng(0)
    z = rng.standard_t(4, 4000)
    [s] = cal.claim_summaries(_data(z, dof=4.0))
    assert np.sqrt(np.mean(z ** 2)) > cal.RMS_HIGH and 0.9 < s.rms < 1.1 and not s.problems()
    assert s.law == "t(4)" and s.ks_p > 0.001
    assert cal.normal_score(-2.0, 4.0) == pytest.approx(-cal.normal_score(2.0, 4.0))
    assert cal.normal_score(2.776, 4.0) == pytest.approx(1.96, abs=2e-3)  # the t quantile of 0.975 at 4 dof


@pytest.mark.parametrize("shift, scale, words", [(0.0, 1.0, []), (0.5, 1.0, ["biased"]), (0.0, 1.6, ["too wide"]),
                                                 (0.0, 0.3, ["too narrow"])])
def test_the_limits_find_bias_and_spread(shift, scale, words):
    z = shift + scale * np.random.default_rng(1).standard_normal(200)
    [s] = cal.claim_summaries(_data(z))
    assert [p.split(":")[0] for p in s.problems()] == words
    assert s.verdict == (", ".join(words) or "calibrated")
    assert s.mean == pytest.approx(np.mean(z)) and s.mean_se == pytest.approx(np.std(z, ddof=1) / np.sqrt(200))
    assert s.max_abs == pytest.approx(np.max(np.abs(z)))


def test_the_skewness_limit_finds_a_heavy_tail_that_mean_and_spread_do_not():
    """Scores of mean 0 and variance 1 whose left tail is heavy (a t statistic of a mean of skewed values): inside the
    bias and spread limits, outside the skewness limit, with the tail probability of D'Agostino's z as its chance;
    the same scores mirrored are skewed the other way; below SKEW_MIN_SEEDS seeds the limit is not applied."""
    from scipy import stats as st

    e = np.random.default_rng(4).exponential(1.0, 200)
    z = 1.0 - e  # mean 0, variance 1, skewness -2
    [s] = cal.claim_summaries(_data(z))
    assert [p.split(":")[0] for p in s.problems()] == ["skewed"] and s.skew_z < -cal.SKEW_LIMIT
    assert s.chance == pytest.approx(2 * st.norm.sf(abs(s.skew_z)))
    [m] = cal.claim_summaries(_data(-z))
    assert m.skew_z == pytest.approx(-s.skew_z) and m.verdict == "skewed"
    [few] = cal.claim_summaries(_data(z[: cal.SKEW_MIN_SEEDS - 1]))
    assert few.skew_z == 0.0 and "skewed" not in few.verdict


def test_false_fails_get_an_exact_interval_and_pool_into_the_error_budget():
    status = ["failed"] + ["not_resolvable"] + ["passed"] * 98
    data = _data(np.zeros(100), status=status)
    data["claims"]["c"]["in_band"] = [False, False] + [True] * 98  # one miss failed, one was gated undecided
    [s] = cal.claim_summaries(data)
    assert (s.failed, s.misses, s.runs) == (1, 2, 100)
    assert s.fail_low == pytest.approx(0.002431, rel=1e-3) and s.fail_high == pytest.approx(0.070383, rel=1e-3)
    [t] = cal.claim_summaries(_data(np.zeros(100), claim="d"))
    b = cal.build_false_fail_rate([s, t])
    assert (b["misses"], b["failures"], b["runs"], b["claims"]) == (2, 1, 200, 2)
    assert b["rate"] == pytest.approx(0.01) and b["build"] == pytest.approx(1 - 0.99 ** 2)
    assert cal.build_false_fail_rate([s, t], points=100)["build"] == pytest.approx(1 - 0.99 ** 200)


def test_failed_page_runs_of_every_kind_pool_into_a_whole_builds_rate():
    """A page run fails when a claim of any kind fails (a bound, a sign test: no score, no calibration entry); the
    build's rate pools the files' failed runs over their runs, per page once."""
    a = dict(_data(np.zeros(100)), failed_seeds=[1010, 1020])  # no statistical claim failed there
    b = _data(np.zeros(100), notebook="cot/setup", status=["failed"] + ["passed"] * 99)
    r = cal.run_failures([a, b])
    assert (r["failed"], r["runs"], r["pages"]) == (3, 200, 2)
    assert r["rate"] == pytest.approx(0.015) and r["build"] == pytest.approx(1 - 0.985 ** 2)
    assert r["rate_high"] == pytest.approx(cal.clopper_pearson(3, 200)[1]) and r["build_high"] > r["build"]
    assert cal.run_failures([a, b], pages=16)["build"] == pytest.approx(1 - 0.985 ** 16)
    assert math.isnan(cal.run_failures([])["build"])
    # collected from a sweep's points: a run that failed with no statistical record, an error (no run) left out
    pts = [{"parameters": {"seed": x}, "status": st, "records": [{"claim": "b", "kind": "bound", "status": rs}]}
           for x, st, rs in [(3, "failed", "failed"), (1, "ok", "passed"), (2, "error", None)]]
    assert cal.collect(pts) == {"seeds": [1, 3], "failed_seeds": [3], "claims": {}}


def test_a_strip_figure_is_the_same_svg_each_build():
    """The Calibration page's figures carry no build date: a build that changed nothing writes the same page."""
    rows = cal.claim_summaries(_data(np.random.default_rng(2).standard_normal(50)))
    one = page.strip_figure(rows)
    assert one == page.strip_figure(rows) and "base64," in one


def test_the_light_statistics_are_scipy_stats_own():
    """The exact interval and the normal scores from scipy.special (a column at once, no scipy.stats import) equal
    scipy.stats' binomtest interval and t/normal distributions, at the edges too (no miss, all misses, a tail that
    underflows, no dof)."""
    from scipy import stats as st

    for k, n in [(0, 1), (0, 6941), (2, 6941), (1, 2), (7, 7), (3, 40)]:
        ci = st.binomtest(k, n).proportion_ci(0.95, method="exact")
        assert cal.clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-15)
    z = [-40.0, -3.0, -0.2, 0.0, 0.5, 2.776, 9.0, 1.5]
    dof = [3.0, 4.0, 4.0, 10.0, 1.5, 4.0, 1e6, None]
    u = cal.normal_scores(z, dof)
    for zi, di, ui in zip(z, dof, u):
        tail = st.t.cdf(-abs(zi), di) if di is not None else None
        want = zi if tail is None or tail == 0 else float(np.copysign(-st.norm.ppf(tail), zi))
        assert ui == pytest.approx(want, rel=1e-9, abs=1e-12), (zi, di)
    assert cal.normal_score(1.5, None) == 1.5


def test_a_sweeps_count_of_misses_is_the_calibration_pages():
    """`companion sweep`'s last line pools the smoke points' misses from the counts alone (miss_counts): the same
    misses, runs, claims and rate as the Calibration page's summaries."""
    from companion.cli import _expected_false_alarms

    data = cal.read_all()
    counts = [c for d in data if d["point"] == "smoke" for c in cal.miss_counts(d)]
    sums = [s for d in data if d["point"] == "smoke" for s in cal.claim_summaries(d)]
    assert [(c.notebook, c.claim, c.runs, c.failed, c.misses) for c in counts] == \
        [(s.notebook, s.claim, s.runs, s.failed, s.misses) for s in sums]
    assert cal.build_false_fail_rate(counts) == cal.build_false_fail_rate(sums)
    none = _data(np.zeros(3), status=["not_applicable"] * 3)
    none["claims"]["c"]["z"] = [None] * 3  # not applicable at this point: no run to count
    assert cal.miss_counts(none) == [] and cal.claim_summaries(none) == []
    pooled = cal.build_false_fail_rate(sums)
    assert f"({pooled['misses']} of {pooled['runs']} at the smoke points)" in _expected_false_alarms("/nonexistent")


def test_a_changed_code_version_marks_every_claim_stale():
    data = _data(np.zeros(10))
    assert not cal.claim_summaries(data, "v")[0].stale and cal.claim_summaries(data, "w")[0].stale
    assert "stale" in cal.claim_summaries(data, "w")[0].problems()[-1]


def test_a_point_whose_parameters_changed_marks_its_file_stale(tmp_path, monkeypatch):
    """A calibration file made at other sizes than its point has now (tests/smoke, tests/domain) measured another
    experiment: stale, on the page and in the staleness test; the same parameters (the seed aside) are current."""
    from companion.run import calibrate as run_cal

    data = _data(np.zeros(10), notebook="cot/looped")
    data["parameters"] = run_cal.calibration_parameters("cot/looped", "smoke")
    assert "seed" not in data["parameters"]
    assert not cal.claim_summaries(data, "v", data["parameters"])[0].stale
    assert cal.claim_summaries(data, "v", dict(data["parameters"], replicates=1))[0].stale
    (tmp_path / "cot__looped__smoke.json").write_text(json.dumps(data))
    monkeypatch.setattr(page, "code_version", lambda nb: "v")
    assert not any(s.stale for s in page.summaries(tmp_path))
    data["parameters"] = dict(data["parameters"], steps=data["parameters"]["steps"] + 1)
    (tmp_path / "cot__looped__smoke.json").write_text(json.dumps(data))
    assert all(s.stale for s in page.summaries(tmp_path))
    data["point"] = "domain:99"  # a point the tests no longer run
    (tmp_path / "cot__looped__smoke.json").write_text(json.dumps(data))
    assert all(s.stale for s in page.summaries(tmp_path))


def test_the_page_counts_where_a_decisive_claim_decides():
    """A claim decides at a seed when it passes or fails: the table's *decided* column counts those seeds among the
    recorded ones, and the power paragraph lists the decisive claims that decide at fewer than half."""
    status = ["passed", "not_resolvable", "not_resolvable", "failed", "not_applicable"]
    data = _data([0.1, 0.2, -0.1, 5.0, 0.0], status=status, notebook="cot/looped", claim="cotloop_trained_optimum")
    data["claims"]["cotloop_trained_optimum"]["z"][4] = None
    (s,) = cal.claim_summaries(data)
    assert (s.decided, s.runs) == (2, 4) and page._decided_words(s) == "2 of 4"
    assert ">2</span>" in page._decided_cell(s) and "2 of 4" in page._decided_cell(s)
    assert page.headline_entries([s]) == [s]
    assert "`cotloop_trained_optimum` at smoke (2 of 4)" not in page._power_words([s])  # half decide: not weak
    data["claims"]["cotloop_trained_optimum"]["status"][0] = "not_resolvable"
    (weak,) = cal.claim_summaries(data)
    assert page._decided_words(weak) == "1 of 4"
    assert "- cot/looped: `cotloop_trained_optimum` at smoke (1 of 4)" in page._power_words([weak])
    other = cal.claim_summaries(_data([0.1] * 4, status=["not_resolvable"] * 4, notebook="cot/looped",
                                      claim="cotloop_c2"))  # not a decisive claim: not in the paragraph
    assert page.headline_entries(other) == [] and page._decided_cell(other[0]) == "none"
    assert page._decided_cell(cal.claim_summaries(_data([0.1] * 3))[0]) == "all"


def test_signed_z_keeps_the_sign_and_reads_old_records():
    rec = {"kind": "statistical", "status": "passed", "measured": 0.9, "predicted": 1.0, "se": 0.05}
    assert cal.signed_z(rec) == pytest.approx(-2.0)
    assert cal.signed_z(dict(rec, z_score=1.5)) == 1.5
    assert cal.signed_z(dict(rec, se=1e-16)) is None  # a noiseless quantity: round-off, not a statistic
    assert cal.signed_z(dict(rec, kind="bound")) is None and cal.signed_z(dict(rec, status="not_applicable")) is None


def test_the_code_version_follows_the_claims_code_and_not_the_prose(monkeypatch):
    """A changed code cell of the notebook changes the version; a changed prose cell does not (the package's files
    go through code_text, tested below)."""
    v = cal.code_version("mesa/setup")
    assert v == cal.code_version("mesa/setup") and v != cal.code_version("cot/setup")
    load = cal.nbs.load

    def edited(kind, text):
        def fake(name):
            nb = load(name)
            [cell] = [c for c in nb.cells if c.cell_type == kind][-1:]
            cell.source += text
            return nb
        return fake

    monkeypatch.setattr(cal.nbs, "load", edited("markdown", "\nMore words.\n"))
    assert cal.code_version("mesa/setup") == v
    monkeypatch.setattr(cal.nbs, "load", edited("code", "\nx = 1\n"))
    assert cal.code_version("mesa/setup") != v


# ------------------------------------------------------------------------------- the command
@pytest.mark.slow
def test_calibrate_runs_seeds_through_the_sweep_runner_and_resumes(tmp_path):
    """The first calibration on a local cluster of its own; the refused rerun, the resumed and the grown one on a
    running scheduler (as on a cluster), whose worker's warm kernel serves them all."""
    with one_worker_scheduler() as address:
        _calibrate_checks(tmp_path, address)


def _calibrate_checks(tmp_path, address: str) -> None:
    out = tmp_path / "cal"
    first = run_cli("calibrate", "mesa/setup", "--seeds", "2", "-o", str(out), "--quiet", "--workers", "1")
    # exit 1 when an entry is outside the limits (likely at 2 seeds), 0 otherwise
    assert first.returncode in (0, 1) and "mesa/setup smoke -> " in first.stdout, first.stderr
    data = cal.read(out / "mesa__setup__smoke.json")
    assert data["seeds"] == [cal.FIRST_SEED, cal.FIRST_SEED + 1] and data["code_version"] == cal.code_version("mesa/setup")
    assert set(data["claims"]) == {"grad_formula", "loss_formula"}
    rows = [json.loads(line) for line in (out / "runs" / "mesa__setup__smoke" / "results.jsonl").read_text().splitlines()]
    for col_claim, col in data["claims"].items():
        for i, seed in enumerate(data["seeds"]):
            [point] = [r for r in rows if r["parameters"]["seed"] == seed]
            [rec] = [r for r in point["records"] if r["claim"] == col_claim]
            assert col["z"][i] == pytest.approx((rec["measured"] - rec["predicted"]) / rec["se"], rel=1e-5)
    refused = run_cli("calibrate", "mesa/setup", "--seeds", "2", "-o", str(out), "--quiet", "--scheduler", address)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    more = run_cli("calibrate", "mesa/setup", "--seeds", "3", "-o", str(out), "--quiet", "--scheduler", address,
                   "--resume")
    assert more.returncode in (0, 1) and "mesa/setup smoke -> " in more.stdout, more.stderr
    assert cal.read(out / "mesa__setup__smoke.json")["seeds"] == [cal.FIRST_SEED + i for i in range(3)]
    before = cal.read(out / "mesa__setup__smoke.json")
    grown = run_cli("calibrate", "mesa/setup", "--seeds", "4", "-o", str(out), "--quiet", "--scheduler", address,
                    "--extend")
    assert grown.returncode in (0, 1) and "grown to 4 seeds" in grown.stdout, grown.stderr
    after = cal.read(out / "mesa__setup__smoke.json")
    assert after["seeds"] == [cal.FIRST_SEED + i for i in range(4)] and after["runs"]["total"] == 4
    for claim, col in before["claims"].items():  # the three seeds it held are kept as they were, one more follows
        assert all(after["claims"][claim][k][:3] == col[k] for k in col) and after["claims"][claim]["z"][3] is not None


def test_restamp_compares_every_column_at_the_rerun_seeds():
    from companion.run.calibrate import compare_columns

    old = dict(_data([0.5, -1.25, 2.0]), seeds=[1000, 1001, 1002])
    same = json.loads(json.dumps(old))
    same["claims"]["c"]["z"][1] = -1.25001  # the file's 6 significant digits: the same number
    assert compare_columns(old, same, [1000, 1001]) == []
    moved = json.loads(json.dumps(old))
    moved["claims"]["c"]["z"][1] = -1.2503  # a record that moved by 2e-4 of its z
    assert compare_columns(old, moved, [1000, 1001]) == ["c: z at seed 1001 was -1.25, now -1.2503"]
    assert compare_columns(old, moved, [1000, 1002]) == []  # only the compared seeds count
    flipped = json.loads(json.dumps(old))
    flipped["claims"]["c"]["status"][0] = "not_resolvable"
    assert compare_columns(old, flipped, [1000]) == ["c: status at seed 1000 was 'passed', now 'not_resolvable'"]
    extra = json.loads(json.dumps(old))
    extra["claims"]["new"] = {"z": [0.1, None, None], "status": ["passed", None, None]}
    assert compare_columns(old, extra, [1000]) == ["new: recorded only by the current code"]
    assert compare_columns(old, extra, [1001]) == []  # not recorded at that seed: nothing to compare
    other = dict(json.loads(json.dumps(old)), failed_seeds=[1002])  # a claim of another kind failed the run
    assert compare_columns(old, other, [1000, 1002]) == ["the page run at seed 1002 failed, before it passed"]
    assert compare_columns(other, old, [1000, 1001]) == []
    # a rerun holds its own seeds: compared seed by seed, not by position
    sub = {"seeds": [1001], "failed_seeds": [], "claims": {"c": {k: [v[1]] for k, v in old["claims"]["c"].items()}}}
    assert compare_columns(old, sub, [1001]) == []


def test_relevel_redraws_every_band_at_the_new_level_and_the_statuses_that_follow():
    """A file of the level 4 (no ``level``: from before the budget) redrawn at 3.9: the critical values from the
    dof, a pass now outside its band failed, a Student-t pass whose band passes MAX_CRIT undecided (at a wider
    level), a noise-free cell's flag kept; the score columns untouched; an undecided pass in band counted unknown."""
    from companion.run.calibrate import file_level, relevel_data
    from companion.stats import critical

    col = {"z": [3.95, 1.0, None, 0.5, -3.95], "dof": [None, 30.0, None, None, None],
           "status": ["passed", "passed", "passed", "not_resolvable", "passed"],
           "crit": [4.0, critical(4, 30), 4.0, 4.0, 4.0], "in_band": [True, True, True, True, True],
           "floor_se": [0.0, 0.0, None, 0.0, 0.1]}
    data = {"seeds": [1, 2, 3, 4, 5], "claims": {"c": col}}
    assert file_level(data) == 4.0
    new, counts = relevel_data(data, 3.9)
    c = new["claims"]["c"]
    assert new["level"] == 3.9 and file_level(new) == 3.9 and data["claims"]["c"] is col and col["crit"][0] == 4.0
    assert c["crit"] == pytest.approx([3.9, critical(3.9, 30), 3.9, 3.9, 3.9], rel=1e-12)
    assert c["in_band"] == [False, True, True, True, True]  # |-3.95| <= 3.9 + 0.1: the floor counts
    assert c["status"] == ["failed", "passed", "passed", "not_resolvable", "passed"]
    assert c["z"] == col["z"] and c["floor_se"] == col["floor_se"]
    assert counts == {"from_level": 4.0, "level": 3.9, "crit": 5, "in_band": 1, "failed_by_flip": 1, "unknown": 1}
    wide, _ = relevel_data(data, 7.0)  # at 30 dof the band of 7 normal SE exceeds MAX_CRIT: undecided
    assert critical(7.0, 30) > 8 and wide["claims"]["c"]["status"][1] == "not_resolvable"


def test_relevel_decides_the_power_of_a_pass_from_the_falsifiers_distance():
    """With the falsifier's distance recorded (``gap_se``), a pass at a wider level is undecided when the falsifier
    lies nearer than the wider band detects, and stays a pass when it lies beyond; without it the pass is unknown."""
    from companion.run.calibrate import relevel_data
    from companion.stats import detectable

    col = {"z": [0.5, 0.5, 0.5], "dof": [None] * 3, "status": ["passed"] * 3, "crit": [3.9] * 3,
           "in_band": [True] * 3, "floor_se": [0.0] * 3, "gap_se": [7.0, 9.0, None]}
    new, counts = relevel_data({"seeds": [1, 2, 3], "level": 3.9, "claims": {"c": col}}, 4.8)
    assert detectable(4.8, 1.0) > 7.0 > detectable(3.9, 1.0) and detectable(4.8, 1.0) < 9.0
    assert new["claims"]["c"]["status"] == ["not_resolvable", "passed", "passed"] and counts["unknown"] == 1


def test_repower_keeps_every_score_and_failure_and_counts_the_passes_it_cannot_decide():
    """A file from before the power rule: its in-band passes and undecided runs are unknown (counted), its failures
    and out-of-band runs are kept; a restamp's comparison takes passed and not_resolvable as equal there and ignores
    the falsifier distance the file lacks, and the rerun seeds' statuses replace the file's."""
    from companion.run.calibrate import STATUS_RULE, _with_rerun, compare_columns, repower_data

    col = {"z": [0.5, 9.0, -0.2, 0.1], "dof": [None] * 4, "status": ["passed", "failed", "not_resolvable", "passed"],
           "crit": [3.9] * 4, "in_band": [True, False, True, True], "floor_se": [0.0] * 4}
    old = {"seeds": [1, 2, 3, 4], "failed_seeds": [2], "claims": {"c": col}}
    data, counts = repower_data(old)
    c = data["claims"]["c"]
    assert data["rule"] == STATUS_RULE and counts == {"rule": STATUS_RULE, "unknown": 3}
    assert c["status"] == col["status"] and c["z"] == col["z"] and c["gap_se"] == [None] * 4 and "gap_se" not in col
    now = {"seeds": [1, 2], "failed_seeds": [2],
           "claims": {"c": dict({k: v[:2] for k, v in col.items()}, status=["not_resolvable", "failed"],
                                                gap_se=[5.0, 20.0])}}
    assert compare_columns(data, now, [1, 2], split_unknown=True) == []
    assert compare_columns(data, now, [1, 2]) != []  # a file at the rule compares statuses exactly
    holes = json.loads(json.dumps(data))
    holes["claims"]["c"]["z"][0] = None  # any other column is compared as before, a hole in the old file too
    assert compare_columns(holes, now, [1], split_unknown=True) == ["c: z at seed 1 was None, now 0.5"]
    failed = json.loads(json.dumps(now))
    failed["claims"]["c"]["status"][0] = "failed"
    assert compare_columns(data, failed, [1], split_unknown=True)  # a failure is never an unknown
    merged = _with_rerun(data, now, counts)
    assert merged["claims"]["c"]["status"] == ["not_resolvable", "failed", "not_resolvable", "passed"]
    assert merged["claims"]["c"]["gap_se"] == [5.0, 20.0, None, None] and counts["unknown"] == 2


def test_the_page_says_which_files_were_restamped():
    files = [_data([0.1, 0.2]), dict(_data([0.3, 0.4]), restamped=[{"from": "a", "commit": "0123456789abc", "seeds": 7},
                                                                  {"from": "b", "commit": "fedcba9876543", "seeds": 5}])]
    words = page._restamp_words(files)
    assert "1 of the files" in words and "at least 5" in words and "`fedcba9876`" in words and "0123" not in words
    assert page._restamp_words(files[:1]) == "" and "another level" not in words
    rel = {"from_level": 4.0, "level": 3.93, "crit": 9, "in_band": 2, "failed_by_flip": 1, "unknown": 5}
    files.append(dict(_data([0.5]), restamped=[{"from": "c", "commit": "0123456789abc", "seeds": 2, "relevel": rel}]))
    words = page._restamp_words(files)
    assert "1 of them was made at another level" in words and "(4 to 3.93 normal SE)" in words, words
    assert "2 runs left or entered their band (1 counted failed), and 5 runs kept the status" in words, words
    assert "rejected with power" not in words
    files.append(dict(_data([0.5]), restamped=[{"from": "d", "commit": "0123456789abc", "seeds": 2,
                                                "repower": {"rule": "power", "unknown": 7}}]))
    words = page._restamp_words(files)
    assert "1 of them was made before a statistical claim's falsifier had to be rejected with power" in words, words
    assert "7 runs inside their band kept the status" in words, words


@pytest.mark.slow
def test_restamp_carries_a_file_over_only_when_the_rerun_seeds_agree(tmp_path):
    """A calibration of other code (its version changed in the file) is carried over when its first seeds give the
    same columns again, with the check written into it; a file whose numbers the current code does not give again
    (a z changed in the file, as a change of the computation would) is left as it was and the claim named. Every
    run goes through one running scheduler, as on a cluster (its worker's warm kernel serves them all)."""
    with one_worker_scheduler() as address:
        _restamp_checks(tmp_path, address)


def _restamp_checks(tmp_path, address: str) -> None:
    from companion.run.calibrate import calibrate, restamp
    from companion.run.inputs import SweepError

    run = dict(out=tmp_path, progress=False, scheduler=address)
    path = calibrate("mesa/setup", seeds=3, **run)
    good = cal.read(path)
    old = dict(good, code_version="0123456789abcdef")
    path.write_text(json.dumps(old))
    assert restamp("mesa/setup", seeds=2, **run) == (path, [])
    done = cal.read(path)
    assert done["code_version"] == cal.code_version("mesa/setup") and done["claims"] == good["claims"]
    assert [(e["from"], e["seeds"]) for e in done["restamped"]] == [("0123456789abcdef", 2)]
    assert restamp("mesa/setup", seeds=2, **run) == (path, [])  # current: nothing to do
    tampered = json.loads(json.dumps(old))
    claim = sorted(tampered["claims"])[0]
    tampered["claims"][claim]["z"][1] += 0.01
    path.write_text(json.dumps(tampered))
    _, diffs = restamp("mesa/setup", seeds=2, **run)
    assert len(diffs) == 1 and diffs[0].startswith(f"{claim}: z at seed {good['seeds'][1]} was ")
    assert cal.read(path) == tampered
    path.write_text(json.dumps(dict(old, parameters={"T": 7})))
    with pytest.raises(SweepError, match="made at other parameters"):
        restamp("mesa/setup", seeds=2, **run)
    with pytest.raises(SweepError, match="does not exist"):
        restamp("mesa/setup", point="domain:0", seeds=2, **run)


@pytest.mark.parametrize("args, words", [(["--point", "domain:9"], "domain:0 ... domain:1"),
                                         (["--point", "huge"], "smoke, paper or domain:I"),
                                         (["--seeds", "1"], "--seeds must be >= 2"),
                                         (["--seeds", "0"], "--seeds must be >= 2"),  # not the default
                                         (["--extend", "--first-seed", "5"], "leave out --first-seed"),
                                         (["--restamp", "3", "--extend"], "leave out --extend, --resume"),
                                         (["--restamp", "0"], "--restamp must be >= 1")])
def test_bad_calibration_input_is_one_line(tmp_path, args, words):
    proc = run_cli("calibrate", "mesa/setup", "-o", str(tmp_path), *args)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_extend_refuses_a_file_that_is_not_there_or_not_current(tmp_path):
    from companion.run.calibrate import calibrate
    from companion.run.inputs import SweepError

    with pytest.raises(SweepError, match="does not exist; run the calibration without --extend"):
        calibrate("mesa/setup", seeds=3, out=tmp_path, extend=True)
    (tmp_path / "mesa__setup__smoke.json").write_text(json.dumps(dict(_data([0.1, 0.2]), parameters={})))
    with pytest.raises(SweepError, match="made by other code"):
        calibrate("mesa/setup", seeds=3, out=tmp_path, extend=True)


def test_extending_a_calibration_appends_seeds_and_columns():
    from companion.run.calibrate import extend_data

    a = dict(_data([0.5, -1.0]), created="t0", commit="c1", runs={"total": 2, "ok": 2, "failed": 0, "error": 0},
             seconds_per_run=2.0, wall_seconds=10.0, workers=2)
    b = dict(_data([2.0, 0.1, 0.3]), created="t1", commit="c2", runs={"total": 3, "ok": 2, "failed": 1, "error": 0},
             seconds_per_run=4.0, wall_seconds=20.0, workers=2)
    b["seeds"], b["failed_seeds"] = [1002, 1003, 1004], [1003]
    b["claims"]["new"] = b["claims"].pop("c")
    out = extend_data(a, b)
    assert out["seeds"] == [1000, 1001, 1002, 1003, 1004] and out["commit"] == "c1" and out["commits"] == ["c2"]
    assert out["claims"]["c"]["z"] == [0.5, -1.0, None, None, None]
    assert out["claims"]["new"]["z"] == [None, None, 2.0, 0.1, 0.3]
    assert out["runs"] == {"total": 5, "ok": 4, "failed": 1, "error": 0} and out["wall_seconds"] == 30.0
    assert out["failed_seeds"] == [1003]
    assert out["seconds_per_run"] == pytest.approx((2 * 2 + 4 * 3) / 5) and out["created"] == "t1"
    with pytest.raises(ValueError, match="share seeds"):
        extend_data(a, a)


def test_the_limits_break_by_chance_at_the_rate_limit_chance_bounds():
    """Over 20000 synthetic calibrated claims (normal scores) at 20 seeds, the share outside the limits (the rules of
    ClaimCalibration, applied to the same statistics) is at most limit_chance(20), a union bound, within its
    Monte-Carlo error, and not far below it; a flagged entry's chance is the tail probability of its own statistic."""
    import dataclasses

    from scipy import stats as st

    u = np.random.default_rng(7).standard_normal((20000, 20))
    mean, se, rms = u.mean(1), u.std(1, ddof=1) / np.sqrt(20), np.sqrt((u**2).mean(1))
    out = ((np.abs(mean / se) > cal.BIAS_LIMIT) | (rms > cal.RMS_HIGH) | (rms < cal.RMS_LOW)
           | (np.abs(st.skewtest(u, axis=1).statistic) > cal.SKEW_LIMIT))
    p = cal.limit_chance(20)
    assert 0.85 * p < out.mean() <= p + 4 * np.sqrt(p * (1 - p) / 20000)
    assert cal.limit_chance(100) < cal.limit_chance(20) / 5  # the fewer the seeds, the more often
    [s] = cal.claim_summaries(_data(np.zeros(20) + [1, -1] * 10))
    assert s.verdict == "calibrated" and s.chance == 1.0
    wide = dataclasses.replace(s, rms=1.4)
    assert wide.verdict == "too wide" and wide.chance == pytest.approx(st.chi2.sf(20 * 1.4**2, 20))
    biased = dataclasses.replace(s, mean=0.9, mean_se=0.25)
    assert biased.verdict == "biased" and biased.chance == pytest.approx(2 * st.t.sf(3.6, 19))


def test_the_page_shows_every_entry_and_the_error_budget(committed):
    text = page.calibration_markdown(figures=False)
    assert "Error budget" in text
    totals = page._seed_totals(cal.read_all())
    if any(s.verdict != "calibrated" for s in committed):  # the limits' own false alarms, and each entry's chance
        assert f"{100 * cal.limit_chance(cal.DOMAIN_SEEDS):.3g} % at {cal.DOMAIN_SEEDS} seeds" in text
        assert all(f"over {page._of_seeds(s, totals)}; chance " in text for s in committed
                   if s.verdict not in ("calibrated", "stale"))
    for s in committed:
        cell = page._seeds_cell(s, totals)
        assert (f"<tr><td><code>{s.claim}</code></td><td class='cv-num'>{s.law}</td><td class='cv-num'>{cell}</td>"
                f"<td class='cv-num'>{page._decided_cell(s)}</td>") in text
    assert math.isfinite(cal.build_false_fail_rate(committed)["rate"])


def test_a_sweep_states_its_expected_false_alarms_at_the_level_and_the_calibrated_rate(tmp_path, committed):
    """Per point: three statistical claims with an SE and one without (no band), an ordering, a not-applicable
    statistical claim and an identity: 4 decided at the level (5 statistical), at four points."""
    from companion.cli import _expected_false_alarms
    from companion.stats import Z_LEVEL, false_alarm

    pooled = cal.build_false_fail_rate(s for s in committed if s.point == "smoke")
    recs = ([{"kind": "statistical", "claim": f"c{i}", "se": 0.1, "status": "passed"} for i in range(3)]
            + [{"kind": "statistical", "claim": "noise_free", "se": None, "status": "passed"},
               {"kind": "qualitative", "claim": "q", "status": "passed"},
               {"kind": "statistical", "claim": "na", "status": "not_applicable"},
               {"kind": "identity", "claim": "x", "status": "passed"}])
    lines = [json.dumps({"point": f"p{j}", "status": "ok", "records": recs}) for j in range(4)]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    text = _expected_false_alarms(str(tmp_path / "results.jsonl"))
    assert text.startswith(f"16 claim runs decided at the book's level of {Z_LEVEL:.3g} SE: about "
                           f"{16 * false_alarm(Z_LEVEL):.2g} false failures expected"), text
    assert "of them 20 statistical" in text and f"{20 * pooled['rate']:.2g} runs" in text, text
    pages = cal.run_failures(d for d in cal.read_all() if d["point"] == "smoke")
    assert f"({pages['failed']} of {pages['runs']}) about {4 * pages['rate']:.2g} of these 4 page runs" in text, text


def test_code_text_drops_prose_keeps_code_and_its_indentation():
    src = '"""Module."""\nimport x  # why\n\n\ndef f(a):\n    """Doc."""\n    s = "# kept"  # dropped\n    return a\n'
    assert cal.code_text(src) == 'import x\ndef f(a):\n    s = "# kept"\n    return a'
    assert cal.code_text(src.replace("Doc.", "Other words.").replace("# why", "# because")) == cal.code_text(src)
    assert cal.code_text(src.replace("return a", "return -a")) != cal.code_text(src)
    moved = src.replace("    return a\n", "return a\n")  # out of the function: the same tokens, another program
    assert cal.code_text(moved) != cal.code_text(src)
    # a form feed or a tab in a docstring is prose too (str.splitlines breaks lines at a form feed, tokenize does not)
    odd = src.replace("Doc.", "Doc: $\\frac12$ \f and \t here.")
    assert cal.code_text(odd) == cal.code_text(src)


def test_a_claim_recorded_at_fewer_seeds_than_its_file_says_how_many_were_not_applicable():
    """A claim not applicable at some seeds (an unconverged training, a diverged one) has z at fewer seeds than the
    file ran: the page says "3 of 4 seeds (1 not applicable)", not "3 seeds"."""
    data = _data([0.5, -0.3, 0.1, 1.0])
    col = data["claims"]["c"]
    col["z"][1], col["status"][1] = None, "not_applicable"
    (s,) = cal.claim_summaries(data)
    totals = page._seed_totals([data])
    assert page._of_seeds(s, totals) == "3 of 4 seeds (1 not applicable)"
    assert ">3 of 4<" in page._seeds_cell(s, totals) and "1 not applicable" in page._seeds_cell(s, totals)
    (full,) = cal.claim_summaries(_data([0.5, -0.3, 0.1, 1.0]))
    assert page._of_seeds(full, totals) == "4 seeds" and page._seeds_cell(full, totals) == "4"


def test_the_page_is_regenerated_when_a_point_the_tests_run_changes(tmp_path, monkeypatch):
    """The generated page is kept while its inputs are unchanged; the points' parameters decide staleness, so a
    changed tests/smoke or tests/domain file is an input too."""
    for kind in ("smoke", "domain"):
        (tmp_path / "tests" / kind).mkdir(parents=True)
        (tmp_path / "tests" / kind / "cot.yaml").write_text("cot/looped: {d: 4}\n")
    monkeypatch.setattr(page, "points_folders", lambda: [tmp_path / "tests" / k for k in ("smoke", "domain")])
    key = page._inputs_key(tmp_path)
    assert page._inputs_key(tmp_path) == key
    for kind in ("smoke", "domain"):
        (tmp_path / "tests" / kind / "cot.yaml").write_text("cot/looped: {d: 5}\n")
        assert page._inputs_key(tmp_path) != key
        key = page._inputs_key(tmp_path)


def test_the_held_out_check_counts_failures_limits_and_tails_of_the_current_files_only(tmp_path):
    """The held-out paragraph of the Calibration page, from files written here: the failed run named with its claim
    and seed, the broken limit, the scores beyond 4 (a t statistic counts by its normal score), the seeds at which a
    build would have failed; a file whose code changed is left out and named."""
    from companion.site.calibration_page import _point_now, heldout_words

    assert heldout_words(tmp_path / "none", 0.01) == ""
    n = 20
    seeds = list(range(7000, 7000 + n))
    ok = np.random.default_rng(3).standard_normal(n) * 0.9
    z = ok.copy()
    z[4], z[7] = 4.5, -3.2  # seed 7004 fails, 7007 only a tail
    status = ["passed"] * n
    status[4] = "failed"
    t_tail = np.zeros(n)
    t_tail[9] = 4.5  # at 3 dof a t of 4.5 is a normal score of about 2.9: no tail
    live = dict(_data(z, status=status), code_version=cal.code_version("mesa/setup"), seeds=seeds,
                failed_seeds=[7004, 7011],  # at 7011 a claim of another kind failed the run
                parameters=_point_now({"notebook": "mesa/setup", "point": "smoke"}))
    live["claims"]["t"] = {"z": t_tail.tolist(), "dof": [3.0] * n, "status": ["passed"] * n, "crit": [4.0] * n}
    (tmp_path / "mesa__setup__smoke.json").write_text(json.dumps(live))
    old = dict(_data(np.full(n, 9.0), notebook="cot/setup", status=["failed"] * n), seeds=seeds)  # code "v": stale
    (tmp_path / "cot__setup__smoke.json").write_text(json.dumps(old))
    text = heldout_words(tmp_path, 0.0101)
    assert f"at {n} seeds that the committed set does not hold (from 7000 to 7019" in text, text
    assert "1 of 40 claim runs failed" in text, text
    assert "`c` (mesa/setup) at seed 7004; 1 page run failed at a claim of another kind; a whole build" in text, text
    assert "failed at 2 of these 20 seeds" in text and "against the 1.01 % estimated above" in text, text
    assert "1 of 2 notebooks left out, their code changed since: `cot/setup`" in text, text
    assert "2 of 40 normal scores lie beyond 3" in text and "1 beyond 4" in text, text
    assert "at 2 of the seeds" in text and "`t` (mesa/setup) at seed" not in text, text
    assert "expected): `c` (mesa/setup) at seed 7004. Scores of one run" in text, text
    broken = [s for s in page.summaries(tmp_path) if s.notebook == "mesa/setup" and s.verdict != "calibrated"]
    assert f"{len(broken)} of 2 entries break a limit" in text and "`t` (skewed" in text, text
