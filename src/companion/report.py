"""Verdict records rendered for a reader: the table under each notebook's verdict and the "Every claim"
dashboard of a build. One home for both (the notebook table and the dashboard share the row format).

Both are raw HTML inside Markdown (a CommonMark HTML block: no blank line inside), so that the table can
fit the text column: the verdict and the tolerance come first, the claim id is short (its full text is
in its ``title``), and the quantity, the reason and the falsifier sit in a full-width details row under
each claim. Each claim shows its target (what was measured: :data:`companion.claims.TARGETS`) under its
kind; the dashboard counts the claims per kind and per target. The "Results at a glance" page
(:func:`glance_markdown`) shows one row per numbered result: its decisive claim. The classes are styled by ``companion/_static/companion.css`` (registered by
:mod:`companion.site.sphinx_ext`); on a phone the rows stack. The dashboard carries a small inline script
(no network) that filters and sorts the claims.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections import Counter

from . import plotting
from .claims import EVIDENCE_KINDS, KINDS, STATUSES, TARGETS, ResultSpec
from .registry import PAPERS
from .stats import BUILD_CLAIMS, BUILD_FALSE_FAIL, POWER, Z_LEVEL, detectable, false_alarm
from .text import label, math_html, plain_text, short_number, slug

__all__ = ["verdict_label", "verdict_table_markdown", "verdict_table_html", "dashboard_markdown", "counts",
           "fmt_number", "tolerance_text", "RESULTS_URL", "CLOSE", "is_close_competitor", "detectable_of",
           "is_powered", "decisive_claim", "is_evidence", "experiments",
           "glance_markdown", "forest_html", "answer_markdown", "FOREST_CAPTION"]

RESULTS_URL = "results"  # the build's JSON lines, published under _build/html/results/

_STATUS = {"passed": "passed", "failed": "FAILED", "does_not_hold": "does not hold", "not_resolvable": "not resolvable",
           "not_applicable": "not applicable"}
_COLUMNS = [  # (key for sorting, header, title of the header)
    ("status", "verdict", "passed, FAILED, does not hold (a statement of the paper that the book finds not to hold "
     "here, by a rule fixed before the run), not resolvable (the falsifier is not rejected, has no value, or the band "
     "of a statistical claim is wider than 8 SE) or not applicable"),
    ("tolerance", "tolerance", "± t: |measured − predicted| ≤ t (rel.: t·|predicted|); ≤ p + t, ≥ p − t: bounds on "
     "the measured value (p: the predicted bound)"),
    ("claim", "claim", "the claim id; hover for what it measures"),
    ("kind", "kind", "identity (implementation test), numerics, statistical, bound or qualitative; under it the "
     "target: what was measured (trained transformer, reduced model, closed form, Monte Carlo, ODE)"),
    ("predicted", "predicted", "the theory's value (the bound, for a bound)"),
    ("measured", "measured", "the simulation's value"),
    ("z_falsifier", "falsifier", "distance of the measurement from the falsifier's value, in standard errors (with "
     "few degrees of freedom, the band it must exceed: the Student-t critical value)"),
]


def verdict_label(notebook: str) -> str:
    """The MyST label of a notebook's verdict section, e.g. ``verdict-mesa-prop4-1-gaussian``."""
    return "verdict-" + label(notebook)


def claim_anchor(notebook: str, claim: str) -> str:
    """The HTML id of one claim's row in its notebook's table, e.g. ``claim-mesa-setup-mean_x1``."""
    return "claim-" + label(notebook) + "-" + claim


def _esc(text) -> str:
    # also no blank line may appear inside the HTML block: Markdown would end the block there
    return html.escape(" ".join(str(text).split()), quote=True)


#: a number in a table cell of the book (:func:`companion.text.short_number`)
fmt_number = short_number


def tolerance_text(r: dict) -> str:
    """The acceptance rule of a record in a few characters: ``± 0.012`` (absolute), ``± 1e−9 rel.``,
    ``≤ p + 0.01`` / ``≥ p`` (bounds, p the predicted bound)."""
    tol = r.get("tolerance")
    if tol is None:
        return "—"
    cmp = r.get("comparison")
    t = fmt_number(tol)
    if cmp == "abs":
        return f"± {t}"
    if cmp == "rel":
        return f"± {t} rel."
    sign = "≤" if cmp == "upper" else "≥"
    if tol == 0:
        return f"{sign} p"
    return f"{sign} p {'+' if cmp == 'upper' else '−'} {t}"


def _status(r: dict) -> str:
    return r.get("status") or ("passed" if r.get("passed") else "failed")


def _falsifier_distance(r: dict) -> str:
    zf = r.get("z_falsifier")
    if zf is None:
        return "—"
    if zf == math.inf:
        return "∞ SE"
    return f"{zf:.1f} SE" if zf < 100 else f"{fmt_number(zf)} SE"


def _band(r: dict) -> str:
    """' (band c)' when the claim's critical value is a Student-t quantile (few degrees of freedom), so the
    falsifier's distance is read against c, not against z."""
    if r.get("z_falsifier") is None or r.get("dof") is None or r.get("crit") is None:
        return ""
    if r.get("z") is not None and abs(r["crit"] - r["z"]) < 0.05:  # many degrees of freedom: the band is z
        return ""
    return f"<br><span class='cv-band' title='critical number of standard errors: the Student-t quantile on " \
           f"{r['dof']:.3g} degrees of freedom at the level of z = {fmt_number(r.get('z'))}'>band {r['crit']:.1f}</span>"


def _target(r: dict) -> str:
    return r.get("target") or "none"


def _details(r: dict) -> str:
    parts = [f"<span class='cv-quantity'>{math_html(r.get('quantity', ''))}</span>"]
    if r.get("reason"):
        parts.append(f"<span class='cv-reason'><b>Why:</b> {math_html(r['reason'])}</span>")
    if r.get("note"):
        parts.append(f"<span class='cv-note'><b>{_STATUS.get(_status(r), '').capitalize()}:</b> "
                     f"{math_html(r['note'])}</span>")
    if r.get("supporting"):
        parts.append(f"<span class='cv-supporting-why'><b>Supporting, not counted as evidence:</b> "
                     f"{math_html(r['supporting'])}</span>")
    if r.get("experiment"):
        parts.append(f"<span class='cv-experiment'><b>Experiment:</b> {math_html(r['experiment'])} (other claims "
                     "read the same models: one experiment, several readings)</span>")
    if r.get("falsifier"):
        f = math_html(r["falsifier"])
        if r.get("falsifier_value") is not None:
            f += f" = {fmt_number(r['falsifier_value'])}"
        if r.get("z_falsifier") is not None:
            f += f" ({_falsifier_distance(r)} from the measurement"
            if r.get("z_theory") is not None:
                f += f"; the theory is {_falsifier_distance({'z_falsifier': abs(r['z_theory'])})} from it"
            f += ")"
        parts.append(f"<span class='cv-falsifier'><b>Falsifier:</b> {f}</span>")
    if r.get("se") is not None:
        crit = (f", {r['dof']:.3g} degrees of freedom: {fmt_number(r['crit'])} SE at the level of z = "
                f"{fmt_number(r.get('z'))}" if r.get("dof") is not None and r.get("crit") is not None
                else f", z = {fmt_number(r.get('z'))}")
        parts.append(f"<span class='cv-se'>SE {fmt_number(r['se'])}{crit}"
                     + (f", floor {fmt_number(r['floor'])}" if r.get("floor") else "") + "</span>")
    if r.get("detail"):
        parts.append(f"<details class='cv-detail'><summary>Method</summary>{math_html(r['detail'])}</details>")
    return " ".join(parts)


def _sort_value(r: dict, key: str) -> str:
    if key == "status":
        return str(STATUSES.index(_status(r)) if _status(r) in STATUSES else 9)
    if key == "kind":
        return str(KINDS.index(r["kind"]) if r.get("kind") in KINDS else 9)
    if key in ("claim",):
        return _esc(r.get("claim", ""))
    v = r.get("error" if key == "tolerance" else key)
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return repr(float(v))


def _claim_rows(r: dict, href: str) -> str:
    st = _status(r)
    claim = r.get("claim", "?")
    short = _esc(claim).replace("_", "_<wbr>")
    nb = r.get("notebook", "")
    data = " ".join(f"data-{k.replace('_', '-')}='{_sort_value(r, k)}'" for k, _, _ in _COLUMNS)
    cells = [
        f"<td class='cv-status' data-label='verdict'><span class='cv-badge cv-{st}'>{_STATUS.get(st, st)}</span></td>",
        f"<td class='cv-tol' data-label='tolerance'>{tolerance_text(r)}</td>",
        f"<td class='cv-claim' data-label='claim'><a href='{_esc(href)}' title='{_esc(plain_text(r.get('quantity', '')))}'>"
        f"<code>{short}</code></a></td>",
        f"<td class='cv-kind' data-label='kind'>{_esc(r.get('kind', '?'))}<br>"
        f"<small class='cv-target'>{_esc(_target(r).replace('_', ' '))}</small>"
        + (f"<br><small class='cv-supporting' title='{_esc(plain_text(r['supporting']))}'>supporting</small>"
           if r.get("supporting") else "") + "</td>",
        f"<td class='cv-num' data-label='predicted'>{fmt_number(r.get('predicted'))}</td>",
        f"<td class='cv-num' data-label='measured'>{fmt_number(r.get('measured'))}</td>",
        f"<td class='cv-num' data-label='falsifier'>{_falsifier_distance(r)}{_band(r)}</td>",
    ]
    return (f"<tbody class='cv-claim-group cv-row-{st}' id='{_esc(claim_anchor(nb, claim))}' "
            f"data-notebook='{_esc(nb)}' data-kind-name='{_esc(r.get('kind', '?'))}' "
            f"data-target-name='{_esc(_target(r))}' "
            f"data-status-name='{_esc(st)}' {data}>"
            f"<tr class='cv-main'>{''.join(cells)}</tr>"
            f"<tr class='cv-details'><td colspan='{len(_COLUMNS)}'>{_details(r)}</td></tr></tbody>")


def _head() -> str:
    ths = "".join(f"<th scope='col' data-sort='{k.replace('_', '-')}' title='{_esc(t)}'>{h}</th>"
                  for k, h, t in _COLUMNS)
    cols = "".join(f"<col class='cv-col-{k.replace('_', '-')}'>" for k, _, _ in _COLUMNS)
    return f"<colgroup>{cols}</colgroup><thead><tr>{ths}</tr></thead>"


def _ordered(records: list[dict]) -> list[dict]:
    """Evidence first (by kind in the order of KINDS), implementation identities last."""
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(records, key=lambda r: (r.get("kind") == "identity", order.get(r.get("kind"), 99)))


def verdict_table_html(records: list[dict], link_base: str = "", group_by_kind: bool = True,
                       extra_class: str = "") -> str:
    """The verdict table of one notebook as one HTML block. Each claim links to its notebook's verdict
    section at ``link_base`` (``""``: this page); with ``group_by_kind`` a header row opens each kind."""
    rows = []
    current = None
    for r in _ordered(records):
        kind = r.get("kind", "?")
        if group_by_kind and kind != current:
            current = kind
            n = sum(1 for x in records if x.get("kind", "?") == kind)
            note = " — implementation tests, not evidence for the paper" if kind == "identity" else ""
            rows.append(f"<tbody class='cv-kind-head' data-kind-name='{_esc(kind)}'><tr><th colspan='{len(_COLUMNS)}'>"
                        f"{_esc(kind)} ({n}){note}</th></tr></tbody>")
        href = f"{link_base}#{verdict_label(r.get('notebook', ''))}"
        rows.append(_claim_rows(r, href))
    cls = f"cv-table {extra_class}".strip()
    return f"<div class='cv-wrap'><table class='{cls}'>{_head()}{''.join(rows)}</table></div>"


def verdict_table_markdown(records: list[dict]) -> str:
    """The verdict table of one notebook (Markdown holding one raw HTML block): evidence first,
    implementation identities last; each claim links to this page's verdict section."""
    return verdict_table_html(records) + "\n"


def is_evidence(r: dict) -> bool:
    """Whether a record counts as evidence for its paper: an evidence kind (not an identity) and not supporting
    (:attr:`companion.claims.ClaimSpec.supporting`)."""
    return r.get("kind") in EVIDENCE_KINDS and not r.get("supporting")


def experiments(records: list[dict]) -> int:
    """The number of independent experiments among the evidence ``records``: records that name the same
    ``experiment`` (:attr:`companion.claims.ClaimSpec.experiment`: one set of trained models or one paired design
    read by several claims) count once, every other record once."""
    ev = [r for r in records if is_evidence(r)]
    return len({r["experiment"] for r in ev if r.get("experiment")}) + sum(1 for r in ev if not r.get("experiment"))


def banded(r: dict) -> bool:
    """Whether a record's claim was decided against a band or a margin of standard errors at the book's level, so
    that a correct theorem fails it by chance (the claims :data:`companion.stats.BUILD_CLAIMS` bounds): a statistical
    claim or a bound with a standard error, and every ordering (qualitative claims, counted all although not all
    have a margin in SE). Not-applicable records are not decided."""
    if r.get("status") == "not_applicable":
        return False
    return r.get("kind") == "qualitative" or (r.get("kind") in ("statistical", "bound") and r.get("se") is not None)


def budget_words(records: list[dict]) -> str:
    """One sentence: how many of ``records`` were decided at the book's level, the budget and its split
    (:mod:`companion.stats`), and the Bonferroni bound on the chance that they fail together were every theorem
    right; said plainly when they outnumber the claims the level was sized for."""
    n = sum(1 for r in records if banded(r))
    alpha = false_alarm(Z_LEVEL)
    bound = min(1.0, n * alpha)
    over = n > BUILD_CLAIMS
    return (f"{n} claims were decided against a band of standard errors (statistical claims, bounds with a standard "
            f"error, orderings). The book's error budget is a chance of at most {100 * BUILD_FALSE_FAIL:g} % that a "
            f"whole build fails were every theorem right, split over at most {BUILD_CLAIMS} such claims: a level of "
            f"{Z_LEVEL:.3g} normal standard errors each (the Student-t quantile at the same level where a standard "
            f"error rests on few degrees of freedom), so these {n} fail together by chance with probability at most "
            f"{100 * bound:.2g} %"
            + (f", more than the budget: this build decides more claims than the {BUILD_CLAIMS} the level was sized "
               "for" if over else "")
            + ".")


def counts(records: list[dict]) -> dict:
    """Claims per kind, per target (``"none"``: a record without one) and per status; the evidence claims
    (:func:`is_evidence`), the supporting ones, and the independent experiments among the evidence
    (:func:`experiments`)."""
    return {"kinds": dict(Counter(r.get("kind", "?") for r in records)),
            "targets": dict(Counter(_target(r) for r in records)),
            "statuses": dict(Counter(_status(r) for r in records)),
            "evidence": sum(1 for r in records if is_evidence(r)),
            "supporting": sum(1 for r in records if r.get("supporting")),
            "experiments": experiments(records)}


def _summary_table(records: list[dict], by: str = "kind") -> str:
    """Claims per kind or per target (rows, ``by``) and status (columns)."""
    key = (lambda r: r.get("kind", "?")) if by == "kind" else _target
    order = KINDS if by == "kind" else TARGETS
    rows = [k for k in order if any(key(r) == k for r in records)]
    rows += sorted({key(r) for r in records} - set(rows))
    table = Counter((key(r), _status(r)) for r in records)
    head = "".join(f"<th scope='col'>{_esc(s.replace('_', ' '))}</th>" for s in STATUSES) + "<th scope='col'>all</th>"
    body = []
    for k in rows + ["all"]:
        cells = []
        for s in STATUSES:
            n = sum(v for (kk, ss), v in table.items() if ss == s and (k == "all" or kk == k))
            cells.append(f"<td class='cv-num{' cv-fail' if s == 'failed' and n else ''}'>{n}</td>")
        tot = sum(v for (kk, _), v in table.items() if k == "all" or kk == k)
        label = _esc(k.replace("_", " ")) + (" <small>(not evidence)</small>" if k == "identity" else "")
        cls = " class='cv-total'" if k == "all" else ""
        body.append(f"<tr{cls}><th scope='row'>{label}</th>{''.join(cells)}"
                    f"<td class='cv-num'>{tot}</td></tr>")
    return (f"<div class='cv-wrap cv-wrap-summary'><table class='cv-summary cv-summary-{by}'><thead><tr>"
            f"<th scope='col'>{by}</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _filter_bar(names: list[str]) -> str:
    kinds = "".join(f"<option value='{k}'>{k}</option>" for k in KINDS)
    targets = "".join(f"<option value='{t}'>{t.replace('_', ' ')}</option>" for t in TARGETS)
    stats = "".join(f"<option value='{s}'>{s.replace('_', ' ')}</option>" for s in STATUSES)
    nbs = "".join(f"<option value='{_esc(n)}'>{_esc(n)}</option>" for n in names)
    return ("<form class='cv-filter' id='cv-filter' onsubmit='return false'>"
            "<label>search <input type='search' id='cv-q' placeholder='claim, quantity, reason…'></label>"
            f"<label>kind <select id='cv-kind'><option value=''>all</option>{kinds}</select></label>"
            f"<label>target <select id='cv-target'><option value=''>all</option>{targets}</select></label>"
            f"<label>verdict <select id='cv-status'><option value=''>all</option>{stats}</select></label>"
            f"<label>notebook <select id='cv-nb'><option value=''>all</option>{nbs}</select></label>"
            "<span id='cv-shown' aria-live='polite'></span>"
            "<span class='cv-hint'>Click a column header to sort the claims of each group.</span></form>")


# Filtering and sorting, inline and offline (no library).
_SCRIPT = """<script>
(function () {
  function ready(f) { if (document.readyState !== 'loading') f(); else document.addEventListener('DOMContentLoaded', f); }
  ready(function () {
    var q = document.getElementById('cv-q'), kind = document.getElementById('cv-kind'),
        tg = document.getElementById('cv-target'),
        st = document.getElementById('cv-status'), nb = document.getElementById('cv-nb'),
        shown = document.getElementById('cv-shown');
    if (!q) return;
    var claims = Array.prototype.slice.call(document.querySelectorAll('table.cv-dash tbody.cv-claim-group'));
    function apply() {
      var text = q.value.trim().toLowerCase(), n = 0;
      claims.forEach(function (b) {
        var ok = (!text || b.textContent.toLowerCase().indexOf(text) >= 0 || b.id.toLowerCase().indexOf(text) >= 0) &&
                 (!kind.value || b.dataset.kindName === kind.value) &&
                 (!tg.value || b.dataset.targetName === tg.value) &&
                 (!st.value || b.dataset.statusName === st.value) &&
                 (!nb.value || b.dataset.notebook === nb.value);
        b.hidden = !ok; if (ok) n++;
      });
      document.querySelectorAll('table.cv-dash tbody.cv-kind-head').forEach(function (h) {
        var b = h.nextElementSibling, any = false;
        while (b && b.classList.contains('cv-claim-group')) { if (!b.hidden) any = true; b = b.nextElementSibling; }
        h.hidden = !any;
      });
      document.querySelectorAll('table.cv-dash').forEach(function (t) {
        var s = t.closest('section'); if (s) s.hidden = !t.querySelector('tbody.cv-claim-group:not([hidden])');
      });
      shown.textContent = n + ' of ' + claims.length + ' claims shown';
    }
    [q, kind, tg, st, nb].forEach(function (el) { el.addEventListener('input', apply); el.addEventListener('change', apply); });
    document.querySelectorAll('table.cv-dash thead th[data-sort]').forEach(function (th) {
      th.tabIndex = 0;
      function sort() {
        var key = th.dataset.sort.replace(/-([a-z])/g, function (m, c) { return c.toUpperCase(); });
        var table = th.closest('table'), asc = th.getAttribute('aria-sort') !== 'ascending';
        table.querySelectorAll('thead th').forEach(function (o) { o.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var runs = [], run = null;
        Array.prototype.forEach.call(table.tBodies, function (b) {
          if (b.classList.contains('cv-claim-group')) { if (!run) { run = []; runs.push(run); } run.push(b); }
          else run = null;
        });
        function val(b) { var v = b.dataset[key]; var x = parseFloat(v); return v === '' ? null : (isNaN(x) ? v : x); }
        runs.forEach(function (r) {
          var anchor = r[r.length - 1].nextSibling;
          r.sort(function (a, b) {
            var x = val(a), y = val(b);
            if (x === null) return y === null ? 0 : 1; if (y === null) return -1;
            var c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
            return asc ? c : -c;
          });
          r.forEach(function (b) { table.insertBefore(b, anchor); });
        });
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sort(); } });
    });
    apply();
  });
})();
</script>"""


def notebook_href(name: str, from_dir: str = "book") -> str:
    """Relative URL of a notebook's page from a page in ``from_dir`` (the dashboard lives in book/)."""
    depth = len([p for p in from_dir.split("/") if p])
    return "../" * depth + f"notebooks/{name}.html"


def dashboard_markdown(names: list[str], records: list[dict], missing: list[str]) -> str:
    """MyST for the "Every claim" page: a summary of claims per kind and status and per target and status, a
    filter bar, then per notebook one table of its claims grouped by kind; each claim links to its notebook's
    verdict section."""
    c = counts(records)
    kinds = ", ".join(f"{c['kinds'][k]} {k}" for k in KINDS if k in c["kinds"])
    targets = ", ".join(f"{c['targets'][t]} {t.replace('_', ' ')}" for t in (*TARGETS, "none") if t in c["targets"])
    stats = ", ".join(f"**{c['statuses'][s]} {s.replace('_', ' ')}**" for s in STATUSES if s in c["statuses"])
    lines = [
        f"This build checked **{len(records)} claims** in **{len(names) - len(missing)} notebooks** ({kinds}): "
        f"{stats}. {c['evidence']} claims are evidence for the papers; counting the claims that read the same "
        f"trained models (their *Experiment*, in their details) once, {c['experiments']} independent ones; "
        f"the {c['kinds'].get('identity', 0)} identities are implementation tests, and {c['supporting']} claims of "
        "the other kinds are *supporting*: decided like the rest, but not counted as evidence (each says why: it "
        "repeats another claim's fact, or checks a sampler, a formula or the training code)"
        + (f". No verdict was recorded for {', '.join(missing)}." if missing else "."),
        "",
        budget_words(records),
        "",
        f"By what they measured (the target of each claim in its result's manifest): {targets}.",
        "",
        f"The records of this build, one JSON object per claim: <a class='cv-results-link' "
        f"href='../{RESULTS_URL}/all.jsonl' download>all.jsonl</a> (every claim), "
        f"<a href='../{RESULTS_URL}/summary.json'>summary.json</a>, and one file per notebook (linked below).",
        "",
        _summary_table(records),
        "",
        _summary_table(records, by="target"),
        "",
        _filter_bar([n for n in names if n not in missing]),
        "",
    ]
    for name in names:
        recs = [r for r in records if r.get("notebook") == name]
        if not recs:
            continue
        cn = counts(recs)
        href = notebook_href(name)
        lines += [
            f"## {name}",
            "",
            f"{{ref}}`Verdict section of this notebook <{verdict_label(name)}>` — "
            + ", ".join(f"{cn['kinds'][k]} {k}" for k in KINDS if k in cn["kinds"]) + "; "
            + ", ".join(f"{cn['targets'][t]} {t.replace('_', ' ')}" for t in (*TARGETS, "none") if t in cn["targets"])
            + "; "
            + ", ".join(f"{cn['statuses'][s]} {s.replace('_', ' ')}" for s in STATUSES if s in cn["statuses"])
            + f" · <a href='../{RESULTS_URL}/{slug(name)}.jsonl' download>{slug(name).replace('_', '&#95;')}.jsonl</a>",
            "",
            verdict_table_html(recs, link_base=href, extra_class="cv-dash"),
            "",
        ]
    lines += [_SCRIPT, ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- results at a glance
#: the order in which a result's non-decisive claims are shown: a finding that the paper's statement does not hold
#: here first (the reader must see it), then passed, not resolvable, failed, not applicable
_STATUS_RANK = {"does_not_hold": -1, "passed": 0, "not_resolvable": 1, "failed": 2, "not_applicable": 3}
_KIND_RANK = {"statistical": 0, "bound": 1, "qualitative": 2, "numerics": 3, "identity": 4}
_TARGET_RANK = {t: i for i, t in enumerate(TARGETS)}
_PAPER_TITLES = {name: title for name, _, title in PAPERS}


def _abs_zf(r: dict) -> float:
    zf = r.get("z_falsifier")
    return abs(zf) if isinstance(zf, (int, float)) and math.isfinite(zf) else 0.0


#: a falsifier is a *close* competitor when it lies within this fraction of the prediction
CLOSE = 0.5


def is_close_competitor(r: dict) -> bool:
    """Whether a record's falsifier is a close competitor: it has a value, and
    :math:`|f - p| \\le` :data:`CLOSE` :math:`\\cdot |p|` for the prediction :math:`p` (a falsifier at 0 or
    at a sign is never close to a non-zero prediction)."""
    p, f = r.get("predicted"), r.get("falsifier_value")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (p, f)):
        return False
    return abs(f - p) <= CLOSE * abs(p)


def detectable_of(r: dict) -> float | None:
    """The deviation from the prediction a statistical record detects with probability :data:`~companion.stats.POWER`
    (:func:`companion.stats.detectable`): its ``detectable`` field, or from its band for a record made before it."""
    if r.get("detectable") is not None:
        return float(r["detectable"])
    se, crit = r.get("se"), r.get("crit")
    if r.get("kind") != "statistical" or not isinstance(se, (int, float)) or not isinstance(crit, (int, float)):
        return None
    return detectable(crit, se, r.get("floor") or 0.0, r.get("dof"))


def is_powered(r: dict) -> bool:
    """Whether a record's falsifier lies at least :func:`detectable_of` from its prediction: were the falsifier the
    truth, the claim would reject it (fail) in 99 runs of 100."""
    p, f, d = r.get("predicted"), r.get("falsifier_value"), detectable_of(r)
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (p, f)) or d is None:
        return False
    return abs(f - p) >= d


def _gap(r: dict) -> float:
    p, f = r["predicted"], r["falsifier_value"]
    return abs(f - p) / abs(p) if p else math.inf


def decisive_claim(records: list[dict]) -> tuple[dict | None, bool]:
    """The claim that decides a result, and whether it is decisive.

    Decisive: a headline statistical claim on a ``trained`` model that passed (so its band is at most 8 SE and
    its falsifier was rejected with power, :func:`is_powered`, the verdict's rule), whose falsifier is a close
    competitor (:func:`is_close_competitor`: within 50 % of the prediction); of several, the one whose falsifier is
    closest to the prediction (the hardest competitor it beats), then the largest ``|z_falsifier|``. Without one,
    the best headline claim (else the best claim that is evidence): a statement of the paper that does not hold here
    (``does_not_hold``, a finding) first, then passed before not resolvable before failed before not applicable,
    statistical before the other kinds, a trained model before the other targets, then the
    largest ``|z_falsifier|``; it is returned with ``False``."""
    decisive = [r for r in records if r.get("headline") and r.get("kind") == "statistical"
                and r.get("target") == "trained" and _status(r) == "passed" and is_close_competitor(r)
                and is_powered(r)]
    if decisive:
        return min(decisive, key=lambda r: (_gap(r), -_abs_zf(r))), True
    pool = ([r for r in records if r.get("headline")] or [r for r in records if is_evidence(r)]
            or list(records))
    if not pool:
        return None, False
    return min(pool, key=lambda r: (_STATUS_RANK.get(_status(r), 9), _KIND_RANK.get(r.get("kind"), 9),
                                    _TARGET_RANK.get(r.get("target"), 9), -_abs_zf(r))), False


def _z_text(z) -> str:
    if z is None:
        return ""
    return f"<br><small>({'∞' if z == math.inf else f'{abs(z):.1f}' if abs(z) < 100 else fmt_number(abs(z))} SE)</small>"


def _glance_row(spec: ResultSpec, records: list[dict]) -> str:
    r, decisive = decisive_claim(records)
    number = f"<b>{_esc(spec.number)}</b>"
    if r is not None:  # a page without records may not be in this build: no link
        href = notebook_href(spec.notebook) + "#" + verdict_label(spec.notebook)
        number = f"<a href='{_esc(href)}' title='the verdict section of {_esc(spec.notebook)}'>{number}</a>"
    head = f"<td class='cv-glance-result'>{number}<br><small>{_esc(spec.title)}</small></td>"
    if r is None:
        return f"<tr>{head}<td colspan='5'>no records in this build</td></tr>"
    st = _status(r)
    claim = f"<code>{_esc(r.get('claim', '?')).replace('_', '_<wbr>')}</code><br><small>{_esc(r.get('kind', '?'))}" \
            f" on {_esc(_target(r).replace('_', ' '))}</small>"
    if spec.setting:
        claim += "<br><em class='cv-glance-none'>a setting page: it checks the definitions' formulas</em>"
    elif st == "does_not_hold":
        claim += ("<br><em class='cv-glance-none'>the paper's statement, tested as stated, does not hold at these "
                  "parameters: a finding</em>")
    elif not decisive:
        why = "no decisive claim on a trained model yet"
        p, f = r.get("predicted"), r.get("falsifier_value")
        if (r.get("target") == "trained" and st == "passed" and not is_close_competitor(r)
                and isinstance(p, (int, float)) and isinstance(f, (int, float)) and p):
            why += f" (its falsifier lies {abs(f - p) / abs(p):.0%} from the prediction: not a close competitor)"
        elif (r.get("target") == "trained" and st in ("passed", "not_resolvable") and is_close_competitor(r)
              and not is_powered(r)
              and detectable_of(r) is not None and p):
            why += (f" (its falsifier lies {abs(f - p) / abs(p):.1%} from the prediction, inside the "
                    f"{detectable_of(r) / abs(p):.1%} the band detects with probability {POWER:g}: not rejected with "
                    "power)")
        claim += f"<br><em class='cv-glance-none'>{why}</em>"
    measured = fmt_number(r.get("measured"))
    if r.get("se") is not None:
        measured += f"<br>± {fmt_number(r['se'])}"
    predicted = fmt_number(r.get("predicted")) + _z_text(r.get("z_theory"))
    if r.get("falsifier"):
        value = r.get("falsifier_value")
        falsifier = math_html(r["falsifier"]) + (f" = {fmt_number(value)}{_z_text(r.get('z_falsifier'))}"
                                            if value is not None else " <small>(no value)</small>")
    else:
        falsifier = "—"
    verdict = f"<span class='cv-badge cv-{st}'>{_STATUS.get(st, st)}</span>"
    if r.get("crit") is not None:
        verdict += f"<br><small>band {r['crit']:.1f} SE</small>"
    d, p = detectable_of(r), r.get("predicted")
    if d is not None and isinstance(p, (int, float)) and p:
        verdict += f"<br><small>detects {d / abs(p):.2g}×pred.</small>" if d >= abs(p) else \
            f"<br><small>detects {d / abs(p):.1%}</small>"
    return (f"<tr class='cv-row-{st}'>{head}<td class='cv-claim' style='overflow-wrap: anywhere'>{claim}</td>"
            f"<td>{measured}</td><td>{predicted}</td><td>{falsifier}</td>"
            f"<td>{verdict}</td></tr>")


def _count_words(n: int) -> str:
    return {1: "one", 2: "two", 3: "three"}.get(n, str(n))


def glance_markdown(results: tuple[ResultSpec, ...] | list[ResultSpec], records: list[dict]) -> str:
    """MyST for the "Results at a glance" page: per paper, one row per numbered result (``results``, in book
    order) with its decisive claim (:func:`decisive_claim`) among ``records``: measured ± SE, the prediction and
    the falsifier with its value (each with its distance from the measurement in SE) and the verdict with its band
    (the critical number of SE); the result's number links the verdict section of its page. The count of decisive
    results leaves out the setting pages (``ResultSpec.setting``), whose rows say what they are. A result without
    records in this build says so (and links nothing: its page may not be in the build)."""
    by_nb: dict[str, list[dict]] = {}
    for r in records:
        by_nb.setdefault(r.get("notebook", ""), []).append(r)
    numbered = [s for s in results if not s.setting]
    decided = {s: r for s in numbered for r, ok in [decisive_claim(by_nb.get(s.notebook, []))] if ok}
    n_decisive = len(decided)
    lines = [f"**{n_decisive} of {len(numbered)} results** have a decisive claim on a trained model in this build: a "
             "headline statistical claim on a trained transformer that passed with a band of at most 8 SE and "
             f"rejected a close competitor (a falsifier within {CLOSE:.0%} of the prediction) with power: the "
             f"falsifier lies beyond the deviation the band detects with probability {POWER:g} (\"detects\", as a share "
             "of the prediction, under the verdict). Of several, the one that beats the closest falsifier."]
    shared: dict[str, list[str]] = {}
    for s, r in decided.items():
        if r.get("experiment"):
            shared.setdefault(r["experiment"], []).append(f"{s.number} ({s.paper})")
    if n_decisive:
        n_exp = experiments(list(decided.values()))
        lines[0] += (f" They come from {n_exp} independent experiment{'s' if n_exp != 1 else ''}"
                     + "".join(f"; {' and '.join(v)} read one experiment, {math_html(e)}" for e, v in shared.items()
                               if len(v) > 1) + ".")
    settings = [s for s in results if s.setting]
    if settings:
        lines[0] += (f" (The {_count_words(len(settings))} setting page{'s' if len(settings) > 1 else ''}, "
                     f"{', '.join(s.number.split(',')[0] + ' of the ' + s.paper + ' paper' for s in settings)}, "
                     + ("check formulas, not trained models, and are not counted.)" if len(settings) > 1 else
                        "checks formulas, not a trained model, and is not counted.)"))
    lines.append("")
    # (header, width): a fixed layout that fits the text column; the result's number links its verdict section
    heads = (("result", 17), ("decisive claim", 19), ("measured ± SE", 14), ("prediction", 12), ("falsifier", 24),
             ("verdict", 14))
    papers: list[str] = []
    for s in results:
        if s.paper not in papers:
            papers.append(s.paper)
    for paper in papers:
        rows = [s for s in results if s.paper == paper]
        lines += [f"## {_PAPER_TITLES.get(paper, paper)}", ""]
        body = "".join(_glance_row(s, by_nb.get(s.notebook, [])) for s in rows)
        decisive = []
        for s in rows:
            r, _ = decisive_claim(by_nb.get(s.notebook, []))
            if r is not None:
                decisive.append(dict(r, label=f"{s.number.split(',')[0]}: {r.get('claim', '?')}",
                                     headline=False))
        rest = FOREST_CAPTION.split(": ", 1)[1]
        plot = forest_html(decisive, caption="One row per result: its decisive claim, drawn as on the result's page. "
                           + rest[0].upper() + rest[1:], scale=1.4,
                           extra_class="cv-forest-glance")
        if plot:
            lines += [plot, ""]
        lines += ["<div class='cv-wrap cv-wrap-summary'><table class='cv-summary cv-glance' "
                  "style='table-layout: fixed; width: 100%'><colgroup>"
                  + "".join(f"<col style='width: {w}%'>" for _, w in heads) + "</colgroup><thead><tr>"
                  + "".join(f"<th scope='col'>{h}</th>" for h, _ in heads)
                  + f"</tr></thead><tbody>{body}</tbody></table></div>", ""]
    return "\n".join(lines)



# ------------------------------------------------------------------------------------------- forest plots
FOREST_CAPTION = ("Each row is a statistical claim (★ headline): its measurement (● passed, ◆ not resolvable, "
                  "■ failed, ✚ the paper's statement does not hold here) with its band as a bar, in band half-widths "
                  "from the prediction (the dashed line at 0; the grey zone is where a measurement is accepted), "
                  "and its falsifier ✕ (▶ or ◀ at the edge: further out). At the right, the band's critical value in standard errors (+fl.: a systematic "
                  "floor is a tenth of the band or more). The theory is accepted when the bar covers 0; a "
                  "two-sided claim passes when it also leaves out the ✕. A bound's bar runs on, dotted, to the side "
                  "the bound allows.")


def forest_html(records: list[dict], *, title: str | None = None, caption: str = FOREST_CAPTION,
                scale: float = 1.25, extra_class: str = "") -> str:
    """The forest plot of ``records`` (:func:`companion.plotting.forest`) as one raw-HTML ``<figure>`` (no blank
    line: it sits in the same HTML block as a table): the SVG inline as a data URI, so that the page needs no
    file beside it, shown at ``scale`` times its true size where the column allows (``max-width: 100%`` on a
    phone, where the true size fits), with alt text naming every row and its status, and ``caption``.
    ``""`` when no record has a row."""
    import matplotlib.pyplot as plt

    fig = plotting.forest(records, title=title)
    if fig is None:
        return ""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.05, metadata={"Date": None})  # no build date: the same SVG each build
    width_in = fig.get_tightbbox(fig.canvas.get_renderer()).width + 0.1
    plt.close(fig)
    data = base64.b64encode(buf.getvalue().encode()).decode()
    rows = plotting.forest_rows(records)
    alt = ("Forest plot of the statistical claims: " + "; ".join(
        f"{row['label']} {_STATUS.get(row['status'], row['status'])}" for row in rows) + ".")
    cls = f"cv-forest {extra_class}".strip()
    return (f"<figure class='{cls}'><img src='data:image/svg+xml;base64,{data}' alt='{_esc(alt)}' "
            f"style='width: {round(width_in * 96 * scale)}px'><figcaption>{_esc(caption)}</figcaption></figure>")


def _value_pm(r: dict) -> str:
    m = fmt_number(r.get("measured"))
    return m + (f" ± {fmt_number(r['se'])}" if r.get("se") is not None else "")


#: what a claim measured (:data:`companion.claims.TARGETS`), in words
_TARGET_WORDS = {"trained": "a trained transformer", "reduced": "reduced-model gradient descent",
                 "closed_form": "a closed form", "monte_carlo": "a Monte-Carlo estimate", "ode": "an integrated ODE"}


def answer_markdown(spec: ResultSpec | None, records: list[dict]) -> str:
    """MyST for a result page's "In this book" box: its decisive claim (:func:`decisive_claim`, as on "Results at
    a glance") with what it measured, its measurement ± SE against the prediction and the falsifier (each with
    its distance in SE), the verdict with its band, and links to the result's first figure and to the verdict
    section. Glued by :class:`companion.verdict.Verdict` as ``verdict_answer``: computed from the records, never
    typed."""
    r, decisive = decisive_claim(records)
    if r is None:
        return "This run recorded no claim."
    st = _status(r)
    words = {"passed": "**passed**", "failed": "**failed**", "does_not_hold": "**does not hold here**",
             "not_resolvable": "**not resolvable**", "not_applicable": "**not applicable**"}[st]
    what = r.get("quantity", "")
    target = _TARGET_WORDS.get(r.get("target"), "no stated target")
    lines = [f"{'Headline claim' if r.get('headline') else 'Deciding claim'} `{r.get('claim')}` ({r.get('kind')} on "
             f"{target}): {what}."]
    if r.get("measured") is not None:
        pred = f"the prediction {fmt_number(r.get('predicted'))}"
        if r.get("z_theory") is not None:
            pred += f" ({_z_words(r['z_theory'])} away)"
        sent = f"Measured {_value_pm(r)} against {pred}"
        if r.get("falsifier"):
            sent += f" and the falsifier, {r['falsifier']}"
            if r.get("falsifier_value") is not None:
                sent += f", {fmt_number(r['falsifier_value'])}"
                if r.get("z_falsifier") is not None:
                    sent += f" ({_z_words(r['z_falsifier'])} away)"
        sent += f": {words}"
        if r.get("crit") is not None:
            sent += f", with a band of {r['crit']:.1f} SE"
        lines.append(sent + ".")
    else:
        lines.append(f"Not applicable at these parameters: {r.get('reason', '')}")
    if r.get("note") and st == "not_resolvable":
        lines.append(f"Not resolvable: {r['note']}.")
    if st == "does_not_hold":
        lines.append("The paper's statement, tested as stated, does not hold at these parameters: a finding of the "
                     f"book, not a failure of its code (the rule, fixed before the run: {r.get('note') or ''}).")
    if not decisive and spec is not None and not spec.setting:
        lines.append("No decisive claim on a trained model at these parameters (a headline statistical claim on "
                     f"a trained transformer that passed against a falsifier within {CLOSE:.0%} of the prediction).")
    links = []
    if spec is not None and spec.figures:
        links.append(f"[the figure](#{spec.figures[0].replace('_', '-')})")
    if r.get("notebook"):
        links.append(f"[every claim of this page](#{verdict_label(r['notebook'])})")
    if links:
        lines.append("See " + " and ".join(links) + ".")
    return " ".join(lines)


def _z_words(z) -> str:
    z = abs(z)
    return "∞ SE" if z == math.inf else (f"{z:.1f} SE" if z < 100 else f"{fmt_number(z)} SE")
