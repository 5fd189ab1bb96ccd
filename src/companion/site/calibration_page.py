"""The "Calibration" page (``book/calibration.md``): the committed calibration set, read without recomputation.

Written to ``_build/calibration.md`` when the build starts (:func:`write_calibration_page`), from the files in
``calibration/`` (:mod:`companion.calibration`): a summary with the error budget, the held-out check
(``calibration/heldout/``), the open defects (``calibration/open.yaml``), then per result its table of claims and a
strip plot of the claims' normal scores against the standard normal law.
"""

from __future__ import annotations

import base64
import hashlib
import html
import inspect
import io
import math
import re
from pathlib import Path
from statistics import NormalDist

import yaml

from .. import notebooks as nbs
from .. import plotting
from ..calibration import (
    BIAS_LIMIT,
    FIRST_SEED,
    RMS_HIGH,
    RMS_LOW,
    SKEW_LIMIT,
    SKEW_MIN_SEEDS,
    ClaimCalibration,
    build_false_fail_rate,
    calibration_dir,
    claim_summaries,
    clopper_pearson,
    code_version,
    limit_chance,
    read_all,
    run_failures,
)
from ..claims import REJECTED
from ..registry import all_results
from ..run.calibrate import calibration_parameters, points_folders
from ..run.inputs import SweepError
from ..stats import BUILD_CLAIMS, BUILD_FALSE_FAIL
from ..verdict import MAX_CRIT, Verdict

__all__ = ["CALIBRATION_PAGE", "OPEN_FILE", "summaries", "open_defects", "typed_numbers", "not_calibrated", "uncalibrated", "calibration_markdown",
           "write_calibration_page", "strip_figure", "band_z", "headline_entries", "HELDOUT", "heldout_words"]

CALIBRATION_PAGE = "calibration.md"  # included by book/calibration.md from ../_build/calibration.md
OPEN_FILE = "open.yaml"  # claims outside the limits, each with what is known of its cause
HELDOUT = "heldout"  # calibration/heldout/: the smoke points again at seeds held out from the committed set


def summaries(directory: Path | None = None, current: bool = True) -> list[ClaimCalibration]:
    """Every claim of every committed calibration file; ``current``: marked stale against today's code and against
    the parameters its point has now (``tests/smoke``, ``tests/domain``: a point whose sizes changed is another
    experiment)."""
    out = []
    versions: dict[str, str] = {}
    for data in read_all(directory):
        nb = data["notebook"]
        if current and nb not in versions:
            try:
                versions[nb] = code_version(nb)
            except nbs.NotebookNotFound:  # a copy of the book without this notebook: nothing to compare with
                versions[nb] = "no such notebook here"
        out += claim_summaries(data, versions.get(nb), _point_now(data) if current else None)
    return out


def _point_now(data: dict) -> dict | None:
    """The parameters the point of a calibration file has now (None at the paper's settings, which are the
    notebook's defaults, followed by its code version; a point no longer there: a dict no file holds)."""
    if data["point"] == "paper":
        return None
    try:
        return calibration_parameters(data["notebook"], data["point"])
    except SweepError:
        return {"(no such point now)": data["point"]}


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping, naming it and its line (the plain loader keeps
    the last of the two without a word)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for k, _ in node.value:
            key_ = self.construct_object(k, deep=deep)
            if key_ in seen:
                raise ValueError(f"{OPEN_FILE}: key {key_!r} given twice in one mapping (line {k.start_mark.line + 1})")
            seen.add(key_)
        return super().construct_mapping(node, deep)


#: the fields of an entry of ``outside_limits``
ENTRY_FIELDS = ("cause", "measured")


def _open(directory: Path | None = None) -> dict:
    path = (Path(directory) if directory is not None else calibration_dir()) / OPEN_FILE
    data = (yaml.load(path.read_text(), Loader=_StrictLoader) if path.is_file() else None) or {}
    for k, v in (data.get("outside_limits") or {}).items():
        extra = sorted(set(v) - set(ENTRY_FIELDS)) if isinstance(v, dict) else []
        if extra:
            raise ValueError(f"{OPEN_FILE}: entry {k!r} has field(s) {', '.join(extra)}; allowed: "
                             f"{', '.join(ENTRY_FIELDS)}")
    return data


def open_defects(directory: Path | None = None) -> dict[str, str]:
    """``{"<notebook> <point> <claim>": its cause}``: the entries outside the limits listed in
    ``calibration/open.yaml``, each with the words the page shows (its ``cause``; an entry's ``measured`` notes
    are not shown)."""
    out = {}
    for k, v in (_open(directory).get("outside_limits") or {}).items():
        out[str(k)] = " ".join(str(v.get("cause", "") if isinstance(v, dict) else v).split())
    return out


# a number typed into a cause: a decimal, a ± or a percentage, a power of ten, a count ("24 of 80") or any number of
# two or more digits; causes are words (the page prints the entry's computed statistics beside them)
TYPED_NUMBER = re.compile(r"[+\-−]?\d+\.\d+|±|\d+\s?%|\d+e[+-]?\d+|\d+ of \d+|\b\d{2,}\b")


def typed_numbers(text: str) -> list[str]:
    """The numbers typed into ``text`` (``TYPED_NUMBER``): a cause shown in the book has none."""
    return TYPED_NUMBER.findall(text)


def not_calibrated(directory: Path | None = None) -> dict[str, str]:
    """``{"<notebook>: <claim spec>": why}``: the statistical claims listed as not calibrated yet."""
    return {str(k): str(v).strip() for k, v in (_open(directory).get("not_calibrated") or {}).items()}


def key(s: ClaimCalibration) -> str:
    return f"{s.notebook} {s.point} {s.claim}"


def uncalibrated(sums: list[ClaimCalibration]) -> list[str]:
    """The statistical claims of the registries (``module: claim id``) that no calibrated claim matches."""
    out = []
    for spec in all_results():
        ids = [s.claim for s in sums if s.notebook == spec.notebook]
        for c in spec.claims:
            if c.kind == "statistical" and not any(c.matches(i) for i in ids):
                out.append(f"{spec.notebook}: {c.id}")
    return out


def _pct(p: float) -> str:
    if not math.isfinite(p):
        return "—"
    return f"{100 * p:.3g} %" if p >= 0.01 else (f"{100 * p:.2g} %" if p >= 0.001 else f"{100 * p:.1g} %")


def _chance(p: float) -> str:
    """A chance probability (:attr:`companion.calibration.ClaimCalibration.chance`) in words: ``3 %``, ``2e-05``."""
    return _pct(p) if p >= 1e-3 else f"{p:.1g}"


def _misses(s: ClaimCalibration) -> str:
    """``0/100 (≤ 3.6 %)`` or ``3/100, 1 failed (0.6–8.5 %)``: the misses with their 95 % interval."""
    failed = f", {s.failed} failed" if s.failed else ""
    if s.misses == 0:
        return f"0/{s.runs} (≤ {_pct(s.fail_high)})"
    return f"{s.misses}/{s.runs}{failed} ({_pct(s.fail_low)}–{_pct(s.fail_high)})"


def strip_figure(rows: list[ClaimCalibration]) -> str:
    """One row per claim and point: its normal scores as dots, their mean with 2 SE, against the standard normal
    law's 95 % range (dashed) — an HTML ``<figure>`` with the SVG inline. Claims outside the limits in colour."""
    import matplotlib.pyplot as plt

    n = len(rows)
    fig, ax = plotting.new_figure(width=plotting.FOREST_WIDTH, height=0.8 + 0.32 * n)
    lim = 5.0
    for i, s in enumerate(rows):
        y = n - 1 - i
        bad = s.verdict != "calibrated"
        color = plotting.STATUS_STYLE["failed"][1] if bad else plotting.COLORS[0]
        u = [max(-lim, min(lim, x)) for x in s.scores]
        jitter = [((j * 0.618) % 1 - 0.5) * 0.36 for j in range(len(u))]
        ax.scatter(u, [y + t for t in jitter], s=4, color=color, alpha=0.35, linewidths=0, rasterized=True)
        if s.n >= 2:
            ax.errorbar([s.mean], [y], xerr=[[2 * s.mean_se], [2 * s.mean_se]], fmt="D", ms=4, color="black",
                        capsize=2, lw=1)
    ax.axvline(0, color="black", lw=0.8)
    q95 = NormalDist().inv_cdf(0.975)
    for x in (-q95, q95):
        ax.axvline(x, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(n), [f"{s.claim} ({s.point})" if s.point != "smoke" else s.claim for s in rows][::-1])
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel("normal score of z = (measured − predicted) / SE")
    ax.grid(axis="y", visible=False)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.05, metadata={"Date": None})  # no build date: the same SVG each build
    width_in = fig.get_tightbbox(fig.canvas.get_renderer()).width + 0.1
    plt.close(fig)
    data = base64.b64encode(buf.getvalue().encode()).decode()
    alt = "Normal scores per claim: " + "; ".join(
        f"{s.claim} ({s.point}) mean {s.mean:+.2f}, rms {s.rms:.2f}, {s.verdict}" for s in rows) + "."
    caption = (f"Each dot is one seed's score (clipped at ±{lim:g}); ◆ the mean with two standard errors. A calibrated "
               "claim keeps 95 % of its dots between the dashed lines and its ◆ bar across 0; red: outside the limits.")
    return (f"<figure class='cv-forest cv-calibration'><img src='data:image/svg+xml;base64,{data}' alt='{alt}' "
            f"style='width: {round(width_in * 96 * 1.25)}px'><figcaption>{caption}</figcaption></figure>")


def _restamp_words(files: list[dict]) -> str:
    """A sentence on the files carried over to later code by ``companion calibrate --restamp`` (empty if none)."""
    done = [d for d in files if d.get("restamped")]
    if not done:
        return ""
    last = [d["restamped"][-1] for d in done]
    few = min(e["seeds"] for e in last)
    return (f" {len(done)} of the files were made by earlier code that records the same numbers: each was carried over"
            f" to the current code by `companion calibrate --restamp` when its first seeds (at least {few}), run again,"
            " gave every column again (commit" + ("s " if len({e['commit'][:10] for e in last}) > 1 else " ")
            + ", ".join(f"`{c}`" for c in sorted({e["commit"][:10] for e in last})) + ")." + _relevel_words(files)
            + _repower_words(files))


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def _relevel_words(files: list[dict]) -> str:
    """A sentence on the files whose bands a restamp redrew at a new level
    (:func:`companion.run.calibrate.relevel_data`; empty if none): how many, from and to which level, how many runs
    moved in or out of their band, and how many statuses were kept as recorded because what decides them (the
    falsifier's distance) is not in the file."""
    entries = [e["relevel"] for d in files for e in d.get("restamped", []) if e.get("relevel")]
    if not entries:
        return ""
    levels = sorted({(e["from_level"], e["level"]) for e in entries})
    return (f" {len(entries)} of them {'was' if len(entries) == 1 else 'were'} made at another level: a restamp redrew their bands at the book's level "
            "(" + "; ".join(f"{a:.3g} to {b:.3g} normal SE" for a, b in levels) + ") from the recorded scores, "
            f"{_runs(sum(e['in_band'] for e in entries))} left or entered their band ("
            f"{sum(e['failed_by_flip'] for e in entries)} counted failed), and "
            f"{_runs(sum(e['unknown'] for e in entries))} kept the status they were recorded with (undecided runs whose "
            "falsifier a narrower band might now reject: the file does not hold its distance; no miss count "
            "depends on it).")


def _repower_words(files: list[dict]) -> str:
    """A sentence on the files whose statuses a restamp carried over to the verdict's power rule
    (:func:`companion.run.calibrate.repower_data`; empty if none): how many, and how many in-band runs keep a status
    the rule may have decided otherwise (the file does not hold the falsifier's distance)."""
    entries = [e["repower"] for d in files for e in d.get("restamped", []) if e.get("repower")]
    if not entries:
        return ""
    return (f" {len(entries)} of them {'was' if len(entries) == 1 else 'were'} made before a statistical claim's "
            "falsifier had to be rejected with power (from the prediction's distance to it, not from the measurement): "
            "that rule moves no score, no band and no failure, and the restamp took the statuses of the seeds it ran "
            f"again; {_runs(sum(e['unknown'] for e in entries))} inside their band kept the status they were recorded "
            "with, passed or not resolvable, which the rule may have decided otherwise (the files do not hold the "
            "falsifier's distance; no statistic on this page reads it).")


def calibration_markdown(directory: Path | None = None, figures: bool = True) -> str:
    """The page's generated part (see the module docstring)."""
    sums = summaries(directory)
    if not sums:
        return "No calibration file is committed yet: run `make calibrate`.\n"
    files = read_all(directory)
    totals = _seed_totals(files)
    defects = open_defects(directory)
    out = []
    seeds = sum(len(d["seeds"]) for d in files)
    commits = sorted({c[:10] for d in files for c in (d.get("commit", "?"), *d.get("commits", []))})
    verdicts = [s.verdict for s in sums]
    count = {w: sum(1 for v in verdicts if v == w) for w in dict.fromkeys(verdicts)}
    walls = [(d["wall_seconds"], len(d["seeds"]), d.get("workers")) for d in files if d.get("wall_seconds")]
    z = band_z()
    level = 2 * NormalDist().cdf(-z)
    out.append(f"**The limits**: a mean normal score more than {BIAS_LIMIT:g} of its standard errors from 0; a "
               f"root-mean-square normal score above {RMS_HIGH:g} or below {RMS_LOW:g}; a skewness of the normal scores "
               f"more than {SKEW_LIMIT:g} of its standard errors from 0 (D'Agostino's test, from {SKEW_MIN_SEEDS} seeds "
               f"on). Seeds start at {FIRST_SEED}. A "
               f"calibrated normal band of {z:.3g} standard errors misses {_pct(level)} of runs. "
               + (f"Cost: {sum(n for _, n, _ in walls)} page runs in {sum(w for w, _, _ in walls) / 60:.0f} min of "
                  f"wall time with {max((k or 1) for _, _, k in walls)} local workers ({len(walls)} of {len(files)} "
                  "files timed in one go)." if walls else "") + "\n")
    out.append(f"The committed set holds **{len(files)} calibration files**: {len(sums)} claim entries of "
               f"{len({s.notebook for s in sums})} notebooks at {len({(s.notebook, s.point) for s in sums})} points, "
               f"{seeds} page runs in all (commit{'s' if len(commits) > 1 else ''} "
               + ", ".join(f"`{c}`" for c in commits) + "). Of the entries: "
               + ", ".join(f"**{n} {w}**" for w, n in count.items()) + "." + _restamp_words(files) + "\n")
    missing = uncalibrated(sums)
    if missing:
        whys = not_calibrated(directory)
        out.append("**Not calibrated yet.** Statistical claims of the registries that no entry matches:\n")
        out += [f"- `{m}`: {whys.get(m, 'not yet explained.')}" for m in missing]
        out.append("")
    smoke = [s for s in sums if s.point == "smoke"]
    budget = build_false_fail_rate(smoke)
    sweep = build_false_fail_rate(smoke, points=100)
    pages = run_failures(d for d in files if d["point"] == "smoke")
    hidden = budget["misses"] - budget["failures"]
    out.append(
        f"**Error budget.** The book's target: were every theorem right, one whole build fails with probability at "
        f"most {_pct(BUILD_FALSE_FAIL)}. Split equally over the at most {BUILD_CLAIMS} claims a build decides against a "
        f"band of standard errors, that is a level of {_pct(level)} per claim, {z:.3g} normal standard errors "
        "(`companion.stats.level`; the Student-t quantile at the same level where a standard error has few degrees of "
        "freedom). Measured: "
        f"at the smoke points, {budget['misses']} of {budget['runs']} claim runs left their band "
        f"({budget['failures']} failed; {hidden} were left `not_resolvable` by the rule their claim declares for "
        f"undecided runs): a false-alarm rate per claim and run of {_pct(budget['rate'])} (95 % upper limit "
        f"{_pct(budget['rate_high'])}), against the {_pct(level)} of a calibrated {z:.3g}-SE band. "
        f"With the {budget['claims']} statistical claims of the smoke points run once each, as in one build, the "
        f"chance of at least one false alarm is {_pct(budget['build'])} (at most {_pct(budget['build_high'])}), "
        + ("above the target: the claims outside the limits below spend more than their share; "
           if budget["build"] > BUILD_FALSE_FAIL else "within the target; ") +
        f"for a 100-point sweep of every page, {_pct(sweep['build'])} (at most {_pct(sweep['build_high'])}), "
        f"about {100 * budget['claims'] * budget['rate']:.3g} expected false alarms (at most "
        f"{100 * budget['claims'] * budget['rate_high']:.3g}). "
        f"Claims of every kind (bounds, sign tests and identities fail a run too): {pages['failed']} of the "
        f"{pages['runs']} page runs at the smoke points failed, so that one run of each of the {pages['pages']} "
        f"pages, as in one build, fails with probability {_pct(pages['build'])} (at most "
        f"{_pct(pages['build_high'])}, `companion.calibration.run_failures`).\n")
    out.append(heldout_words((directory if directory is not None else calibration_dir()) / HELDOUT, pages["build"]))
    out.append(_power_words(sums))
    bad = [s for s in sums if s.verdict != "calibrated"]
    if bad:
        floored = sum(1 for s in bad if s.floor_se > 0.5)
        ns = sorted({len(d["seeds"]) for d in files})
        expected = sum(limit_chance(s.n) for s in sums)
        flukes = sum(1 for s in bad if not s.stale and s.chance >= 0.01)
        out.append(f"**Open defects.** {len(bad)} entries are outside the limits; {floored} of them have a band with a "
                   "floor of more than half a standard error, which absorbs their bias. A calibrated claim breaks a "
                   "limit by chance too, the more often the fewer its seeds: with probability at most "
                   + ", ".join(f"{_pct(limit_chance(n))} at {n} seeds" for n in ns)
                   + f" (`companion.calibration.limit_chance`), so that at most {expected:.2g} of the {len(sums)} "
                   f"entries are expected outside the limits by chance alone. After each entry, *chance*: the "
                   "probability that a calibrated claim at its number of seeds deviates at least as much "
                   f"({flukes} of the {len(bad)} have a chance of 1 % or more). Each, with what is known of its "
                   "cause, in words (`calibration/open.yaml`, where the investigations' measurements are kept beside "
                   "them; they were made once, by hand, and are not typed into this page):\n")
        for s in bad:
            why = defects.get(key(s), "Not yet explained.")
            if s.floor_se > 0.5:
                why = (f"Its band adds a floor of {s.floor_se:.2g} SE (median) for a systematic term it does not "
                       "correct. " + why)
            out.append(f"- `{s.claim}` ({s.notebook}, {s.point}): {s.verdict} — mean z {s.mean:+.2f} ± "
                       f"{s.mean_se:.2f}, rms {s.rms:.2f} over {_of_seeds(s, totals)}"
                       + ("" if s.stale else f"; chance {_chance(s.chance)}") + f". {why}")
        out.append("")
    by_nb: dict[str, list[ClaimCalibration]] = {}
    for s in sums:
        by_nb.setdefault(s.notebook, []).append(s)
    titles = {spec.notebook: spec for spec in all_results()}
    for nb, rows in by_nb.items():
        spec = titles.get(nb)
        head = f"{spec.number}: {spec.title}" if spec is not None else nb
        out.append(f"## {head}\n")
        out.append(f"{{doc}}`The page </notebooks/{nb}>`; `{nb}`, code version `{files_version(files, nb)}`.\n")
        if figures:
            out.append(strip_figure(rows) + "\n")
        params = {d["point"]: d.get("parameters") or {} for d in files if d["notebook"] == nb}
        for point in dict.fromkeys(s.point for s in rows):
            where = {"smoke": "the smoke point", "paper": "the paper's settings"}.get(
                point, f"domain point {point.split(':')[-1]}")
            shown = ", ".join(f"{k} = {v}" for k, v in params.get(point, {}).items())
            out.append(f"At {where}" + (f" ({shown})" if shown else "") + ":\n")
            heads = ("claim", "law", "seeds", "decided", "mean z ± SE", "rms z", "max |z|", "misses (95 %)", "KS p", "verdict")
            body = "".join(
                f"<tr><td><code>{html.escape(s.claim)}</code></td><td class='cv-num'>{s.law}</td>"
                f"<td class='cv-num'>{_seeds_cell(s, totals)}</td><td class='cv-num'>{_decided_cell(s)}</td>"
                f"<td class='cv-num'>{s.mean:+.2f} ± {s.mean_se:.2f}</td>"
                f"<td class='cv-num'>{s.rms:.2f}</td><td class='cv-num'>{s.max_abs:.2f}</td>"
                f"<td class='cv-num'>{html.escape(_misses(s))}</td><td class='cv-num'>{s.ks_p:.2g}</td>"
                f"<td class='{'' if s.verdict == 'calibrated' else 'cv-fail'}'>{s.verdict}</td></tr>"
                for s in rows if s.point == point)
            out.append("<div class='cv-wrap cv-wrap-summary'><table class='cv-summary cv-calibration'><thead><tr>"
                       + "".join(f"<th scope='col'>{html.escape(h)}</th>" for h in heads)
                       + f"</tr></thead><tbody>{body}</tbody></table></div>")
            out.append("")
    return "\n".join(out) + "\n"


def heldout_words(directory: Path, build_estimate: float) -> str:
    """The page's paragraph on the held-out check: the smoke points run again at seeds that the committed set does
    not hold (``calibration/heldout/``, ``make calibrate``), judged by the same limits.
    Counted from the files whose code and point are current (the others are named stale): the claim runs that
    failed, by claim and seed, and the page runs that a claim of another kind failed; the entries outside the
    limits against the number expected by chance (:func:`companion.calibration.limit_chance`); the normal scores
    beyond 3 and 4 against the reference law's expectation (the tails), and at how many seeds; the seeds at which a
    whole build (every smoke point once) would have failed (a failed page run, ``failed_seeds``), against
    ``build_estimate``, the committed set's estimate.
    Empty without held-out files."""
    files = read_all(directory) if directory.is_dir() else []
    if not files:
        return ""
    sums = summaries(directory)
    stale = sorted({s.notebook for s in sums if s.stale})
    live = [d for d in files if d["notebook"] not in stale]
    cur = [s for s in sums if not s.stale]
    seeds = sorted({x for d in live for x in d["seeds"]})
    runs = sum(s.runs for s in cur)
    failed = [(d["notebook"], claim, seed) for d in live for claim, col in d["claims"].items()
              for seed, status in zip(d["seeds"], col["status"]) if status in REJECTED]
    lo, hi = clopper_pearson(len(failed), runs) if runs else (0.0, 1.0)
    bad = [s for s in cur if s.verdict != "calibrated"]
    expected = sum(limit_chance(s.n) for s in cur)
    tails = {t: [(s, x) for s in cur for x, u in zip(s.score_seeds, s.scores) if abs(u) > t] for t in (3, 4)}
    scores = sum(s.n for s in cur)
    runs_failed = {(d["notebook"], seed) for d in live for seed in d["failed_seeds"]}  # by a claim of any kind
    other = len(runs_failed - {(nb, seed) for nb, _, seed in failed})
    broke = sorted({seed for _, seed in runs_failed})
    b_lo, b_hi = clopper_pearson(len(broke), len(seeds)) if seeds else (0.0, 1.0)
    first = f"from {seeds[0]} to {seeds[-1]}" if seeds else "none"
    words = [f"**Held-out check.** The smoke points run once more at {len(seeds)} seeds that the committed set does "
             f"not hold ({first}; `calibration/{HELDOUT}/`, `make calibrate`"
             + (f"; {len(stale)} of {len({d['notebook'] for d in files})} notebooks left out, their code changed "
                "since: " + ", ".join(f"`{nb}`" for nb in stale) if stale else "") + "), judged by the same limits. "
             f"{len(failed)} of {runs} claim runs failed ({_pct(len(failed) / runs if runs else math.nan)}, 95 % "
             f"interval {_pct(lo)} to {_pct(hi)})"
             + (": " + ", ".join(f"`{c}` ({nb}) at seed {x}" for nb, c, x in failed) if failed else "")
             + (f"; {other} page run{'s' if other > 1 else ''} failed at a claim of another kind" if other else "")
             + f"; a whole build of the smoke points would have failed at {len(broke)} of these {len(seeds)} seeds "
             f"({_pct(b_lo)} to {_pct(b_hi)}), against the {_pct(build_estimate)} estimated above. "
             f"{len(bad)} of {len(cur)} entries break a limit at these seeds, at most {expected:.2g} expected by "
             "chance" + (": " + "; ".join(
                 f"in {nb} " + ", ".join(f"`{s.claim}` ({s.verdict}, chance {_chance(s.chance)})"
                                         for s in bad if s.notebook == nb)
                 for nb in dict.fromkeys(s.notebook for s in bad)) if bad else "") + ". "
             f"The tails: {len(tails[3])} of {scores} normal scores lie beyond 3 "
             f"({scores * 2 * NormalDist().cdf(-3):.2g} expected), at {len({x for _, x in tails[3]})} of the seeds, and "
             f"{len(tails[4])} beyond 4 ({scores * 2 * NormalDist().cdf(-4):.2g} expected)"
             + (": " + ", ".join(f"`{s.claim}` ({s.notebook}) at seed {x}" for s, x in tails[4]) if tails[4] else "")
             + ". Scores of one run are not independent: the claims that read one training set move together.\n"]
    return "".join(words)


def _decided_words(s: ClaimCalibration) -> str:
    """At how many of the seeds where the claim was recorded it passed or failed (the others: not resolvable):
    ``all``, ``none`` or ``12 of 50``."""
    if s.decided == s.runs:
        return "all"
    return "none" if s.decided == 0 else f"{s.decided} of {s.runs}"


def _decided_cell(s: ClaimCalibration) -> str:
    """The table's decided cell: :func:`_decided_words` without the recorded seeds, which the seeds cell beside it
    shows (a narrow column: the table fits the column at 1280 px)."""
    words = _decided_words(s)
    return words if words in ("all", "none") else f"<span title='{html.escape(words)}'>{s.decided}</span>"


def headline_entries(sums: list[ClaimCalibration]) -> list[ClaimCalibration]:
    """The entries of the results' decisive claims (``headline`` in their manifest line)."""
    specs = {r.notebook: r for r in all_results()}
    out = []
    for s in sums:
        spec = specs[s.notebook].spec_of(s.claim) if s.notebook in specs else None
        if spec is not None and spec.headline:
            out.append(s)
    return out


def _power_words(sums: list[ClaimCalibration]) -> str:
    """The paragraph on how often the decisive claims decide at the points the tests run."""
    heads = [s for s in headline_entries(sums) if s.runs]
    weak = [s for s in heads if 2 * s.decided < s.runs]
    text = ("**Power at the test points.** A claim decides at a seed when it passes or fails; it is `not_resolvable` "
            "when, its theory accepted, its band cannot tell the prediction from the falsifier there: the falsifier "
            f"within the band's reach, a critical value above {MAX_CRIT:g} standard errors, or an undecided gate its "
            f"claim declares (`companion.verdict`; column *decided* below). Of the {len(heads)} entries of the "
            "results' decisive claims, "
            + f"{len(heads) - len(weak)} decide at half of their seeds or more")
    if not weak:
        return text + ".\n"
    by_nb: dict[str, list[ClaimCalibration]] = {}
    for s in weak:
        by_nb.setdefault(s.notebook, []).append(s)
    return (text + f"; {len(weak)} decide at fewer, so that their false-fail and pass rates are measured on few "
            "seeds or none (decided of recorded):\n\n"
            + "".join(f"- {nb}: " + ", ".join(f"`{s.claim}` at {s.point} ({_decided_words(s)})" for s in rows) + "\n"
                      for nb, rows in by_nb.items()))


def _seed_totals(files: list[dict]) -> dict[tuple[str, str], int]:
    """The seeds each calibration file ran, by (notebook, point)."""
    return {(d["notebook"], d["point"]): len(d["seeds"]) for d in files}


def _of_seeds(s: ClaimCalibration, totals: dict) -> str:
    """``23 seeds``, or ``23 of 50 seeds (27 not applicable)`` when the claim was not recorded at every seed."""
    total = totals.get((s.notebook, s.point), s.n)
    return f"{s.n} seeds" if s.n >= total else f"{s.n} of {total} seeds ({total - s.runs} not applicable)"


def _seeds_cell(s: ClaimCalibration, totals: dict) -> str:
    """The table's seeds cell: the seeds with a z, ``of`` the file's when fewer (the others not applicable)."""
    total = totals.get((s.notebook, s.point), s.n)
    if s.n >= total:
        return str(s.n)
    return f"<span title='{total - s.runs} not applicable'>{s.n} of {total}</span>"


def band_z() -> float:
    """The level of the statistical claims' bands in normal standard errors: the default ``z`` of
    :meth:`companion.verdict.Verdict.statistical`, the book's error budget split over its claims
    (:data:`companion.stats.Z_LEVEL`)."""
    return float(inspect.signature(Verdict.statistical).parameters["z"].default)


def files_version(files: list[dict], notebook: str) -> str:
    versions = sorted({d.get("code_version", "?") for d in files if d["notebook"] == notebook})
    return ", ".join(versions)


def _inputs_key(root: Path) -> str:
    """sha256 of everything the page reads: the calibration files, the package's sources, the notebooks and the
    points the tests run (whose parameters decide staleness; raw bytes: cheap, and a change of prose only costs one
    regeneration)."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for base, pattern in ((root / "calibration", "**/*"), (package, "**/*.py"), (root / "notebooks", "**/*.md"),
                          *((folder, "*.yaml") for folder in points_folders())):
        for f in sorted(base.glob(pattern)) if base.is_dir() else ():
            if f.is_file():
                h.update(str(f.relative_to(base)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def write_calibration_page(root: Path) -> Path:
    """Write the generated part to ``<root>/_build/calibration.md`` (untouched when its inputs are unchanged: the
    code versions and figures take seconds, and a build starts Sphinx twice)."""
    page = root / "_build" / CALIBRATION_PAGE
    stamp = page.with_suffix(".key")
    key_now = _inputs_key(root)
    if page.is_file() and stamp.is_file() and stamp.read_text() == key_now:
        return page
    directory = root / "calibration"
    text = calibration_markdown(directory if directory.is_dir() else root / "_no_calibration")
    if not page.is_file() or page.read_text() != text:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
    stamp.write_text(key_now)
    return page
