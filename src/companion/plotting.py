"""Figure standard shared by every notebook: static matplotlib, opaque white background (readable on the
dark theme too), a colour cycle that survives greyscale printing, and sizes chosen for the page.

The standard
------------
* **Sized for the column.** The book's text column is about 672 CSS px = 7 inches at 1280 px. Figures are
  rendered as **SVG** at their true size, so a figure at most :data:`COLUMN_WIDTH` inches wide shows its
  text at the font size set here: 10 pt labels, 9 pt ticks and legends (never less than
  :data:`MIN_FONT_PT`). :func:`new_figure` caps the total width at the column (:data:`MAX_WIDTH` plus
  the padding), whatever the panel count. Never set a smaller font size in a notebook: the site tests
  measure every figure's text as displayed.
* **Legends outside the data.** :func:`legend_outside` puts a legend below (or beside) the axes.
* **Each figure once.** The inline backend would show every open pyplot figure at the end of its cell,
  besides the captioned ``{glue:figure}``; :func:`use_book_style` switches to the non-interactive Agg
  backend, so a figure is shown only where it is glued.
* **Enforced when shown.** Every figure IPython displays (also a glued one) passes
  :func:`enforce_standard` first: a figure wider than the column is scaled down and text set smaller
  than :data:`MIN_FONT_PT` is raised to it.
* **Alt text** comes from the figure's caption (``companion.site.sphinx_ext``): write captions that say what
  is plotted.
"""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

__all__ = ["use_book_style", "new_figure", "legend_outside", "enforce_standard", "forest", "forest_rows", "COLORS",
           "COLUMN_WIDTH", "MAX_WIDTH", "MIN_FONT_PT", "STATUS_STYLE", "FOREST_LIMIT", "FOREST_WIDTH",
           "FORMAT"]

#: the book's line colours, in order of use
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
COLUMN_WIDTH = 7.0  #: inches: the text column at 1280 px (672 CSS px at 96 px per inch)
PAD = 0.1  # inches added around the figure on each side when it is rendered (bbox "tight")
MARGIN = 0.1  # inches kept free: the SVG renderer measures text a little wider than the layout does
MAX_WIDTH = COLUMN_WIDTH - 2 * PAD - MARGIN  #: the widest figure: with its padding it fits the column
MIN_FONT_PT = 9.0  #: the smallest text of a figure, as displayed
FORMAT = "svg"  #: what the notebooks' figures are rendered as (vector: sharp at any zoom and in the PDF)

STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.transparent": False,
    "figure.dpi": 96,  # 1 inch = 96 CSS px: an SVG shows at its true size
    "savefig.dpi": 192,  # rasterised parts (imshow) at 2x
    "figure.figsize": (MAX_WIDTH, 4.0),
    "savefig.pad_inches": PAD,
    "figure.max_open_warning": 0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": matplotlib.cycler(color=COLORS),
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "legend.frameon": False,
    "figure.titlesize": 11,
    "font.size": 10,
    "lines.linewidth": 1.6,
    "svg.fonttype": "none",  # text as text: sharp, searchable, and its size checkable by the site tests
    "svg.hashsalt": "companion",  # reproducible SVG ids
}


def enforce_standard(fig) -> None:
    """Bring a figure to the standard before it is shown: at most :data:`MAX_WIDTH` wide (scaled down with
    its aspect ratio) and no text below :data:`MIN_FONT_PT` (a smaller size set in a notebook is raised).
    Sub- and superscripts inside formulas keep their relative size."""
    from matplotlib.text import Text

    w, h = fig.get_size_inches()
    if w > MAX_WIDTH + 1e-9:
        fig.set_size_inches(MAX_WIDTH, h * MAX_WIDTH / w)
    for ax in fig.axes:  # tick labels made at draw time follow the axis' tick settings
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for which in ("major", "minor"):
                labels = axis.get_ticklabels(which=which)
                if labels and min(t.get_fontsize() for t in labels) < MIN_FONT_PT:
                    ax.tick_params(axis=name, which=which, labelsize=MIN_FONT_PT)
    for t in fig.findobj(Text):
        if t.get_fontsize() < MIN_FONT_PT:
            t.set_fontsize(MIN_FONT_PT)
    # what sticks out of the figure (a legend or a label outside) widens the rendered image: shrink the
    # figure by that much, so the image is not scaled down on the page
    for _ in range(3):
        try:
            extent = fig.get_tightbbox(fig.canvas.get_renderer()).width
        except Exception:  # noqa: BLE001 - a canvas without a renderer: leave the size
            return
        if extent <= MAX_WIDTH + 0.01:
            return
        w, h = fig.get_size_inches()
        fig.set_size_inches(max(w - (extent - MAX_WIDTH) - 0.02, 1.0), h)


def _register_formatter() -> None:
    """Make IPython render a Figure (also a glued one) as SVG whatever the matplotlib backend is, brought
    to the standard first (:func:`enforce_standard`)."""
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # pragma: no cover - IPython and matplotlib-inline come with ipykernel
        return
    ip = get_ipython()
    if ip is None:
        return
    # no build date in the SVG: a run that changed nothing draws the same figure
    set_matplotlib_formats(FORMAT, bbox_inches="tight", pad_inches=PAD, metadata={"Date": None})
    formatter = ip.display_formatter.formatters["image/svg+xml"]
    render = formatter.lookup_by_type(Figure)
    if getattr(render, "_companion_standard", False):
        return

    def render_standard(fig):
        enforce_standard(fig)
        return render(fig)

    render_standard._companion_standard = True
    formatter.for_type(Figure, render_standard)


def use_book_style() -> None:
    """Apply the book's rc settings and figure format (called by :func:`new_figure`)."""
    if "inline" in matplotlib.get_backend().lower():
        plt.switch_backend("agg")  # no automatic display of open figures: each figure once, where glued
    _register_formatter()
    plt.rcParams.update(STYLE)


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 3.4, height: float = 3.0, **kw):
    """A figure with ``nrows x ncols`` panels of about ``width x height`` inches each (constrained layout).
    The whole figure is at most :data:`MAX_WIDTH` wide (with its padding, the column): wider requests are
    scaled down, keeping each panel's aspect ratio, so the text keeps its size on the page."""
    use_book_style()
    total_w, total_h = width * ncols, height * nrows
    if total_w > MAX_WIDTH:
        scale = MAX_WIDTH / total_w
        total_w, total_h = MAX_WIDTH, total_h * scale
    fig, axes = plt.subplots(nrows, ncols, figsize=(total_w, total_h), layout="constrained", **kw)
    return fig, axes


def legend_outside(target, where: str = "below", ncol: int | None = None, **kw):
    """A legend outside the data of an Axes or of a whole Figure (one legend for all panels, labels
    de-duplicated): ``"below"`` or ``"right"``. Constrained layout makes room for it."""
    from matplotlib.figure import Figure

    if isinstance(target, Figure):
        seen: dict = {}
        for ax in target.axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(lab, h)
        labels, handles = list(seen), list(seen.values())
        ncol = ncol or (max(1, min(len(labels), 4)) if where == "below" else 1)
        loc = "outside lower center" if where == "below" else "outside right upper"
        return target.legend(handles, labels, loc=loc, ncol=ncol, **kw)
    handles, labels = target.get_legend_handles_labels()
    if where == "below":
        opts = dict(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=ncol or max(1, min(len(labels), 3)))
    else:
        opts = dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=ncol or 1)
    opts.update(kw)
    return target.legend(handles, labels, **opts)


# ------------------------------------------------------------------------------------------- forest plots
#: marker and colour of a measurement by its status (shape and colour: readable in greyscale and by the colour-blind)
STATUS_STYLE = {"passed": ("o", "#2ca02c", "passed"), "not_resolvable": ("D", "#ff7f0e", "not resolvable"),
                "failed": ("s", "#d62728", "failed"), "does_not_hold": ("P", "#8c564b", "does not hold")}
FOREST_LIMIT = 30.0  #: the axis ends at this many band half-widths; a falsifier beyond it is a triangle at the edge
FOREST_WIDTH = 3.6  #: inches: the per-page forest plot fits a phone's column (about 358 CSS px) at full size


def forest_rows(records) -> list[dict]:
    """The rows of a forest plot: every statistical record and every bound with a standard error that has numbers
    (not applicable ones have none), headline rows first, each in the records' order. A row's values are in
    *band half-widths* from the prediction, :math:`u(v) = (v - p)/t` with ``t`` the record's tolerance
    (``crit * se + floor``): the measurement at :math:`u(m)`, its band :math:`u(m) \\pm 1`, the prediction at 0 and
    the falsifier at :math:`u(f)`; ``lo`` and ``hi`` bound the predictions the claim accepts (:math:`u \\mp 1`; a bound
    ``"upper"`` accepts every prediction from :math:`u - 1` up, ``"lower"`` every one up to :math:`u + 1`). The
    theory is accepted exactly when ``lo <= 0 <= hi``."""
    rows = []
    for r in records:
        r = r if isinstance(r, dict) else r.__dict__
        if r.get("kind") not in ("statistical", "bound") or r.get("se") is None:
            continue
        p, m, t = r.get("predicted"), r.get("measured"), r.get("tolerance")
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (p, m, t)):
            continue
        unit = t if t > 0 else (abs(p) * 1e-12 or 1e-300)
        f = r.get("falsifier_value")
        u = (m - p) / unit
        side = {"upper": "upper", "lower": "lower"}.get(r.get("comparison"), "both")
        rows.append(dict(claim=r.get("claim", "?"), status=r.get("status", "passed"), headline=bool(r.get("headline")),
                         measured=u, side=side,
                         # the values the claim accepts the prediction at: u ± 1, or one-sided for a bound
                         lo=-math.inf if side == "lower" else u - 1, hi=math.inf if side == "upper" else u + 1,
                         falsifier=(f - p) / unit if isinstance(f, (int, float)) and math.isfinite(f) else None,
                         crit=r.get("crit"), floor_share=(r.get("floor") or 0.0) / t if t > 0 else 0.0,
                         label=r.get("label") or r.get("claim", "?")))
    return sorted(rows, key=lambda row: not row["headline"])


def _crit_text(row) -> str:
    if row["crit"] is None:
        return ""
    sign = {"upper": "≤ ", "lower": "≥ "}.get(row["side"], "± ")
    return f"{sign}{row['crit']:.1f} SE" + (" +fl." if row["floor_share"] >= 0.1 else "")


def forest(records, *, title: str | None = None, width: float = FOREST_WIDTH):
    """A forest plot of a page's statistical claims (drawn from its verdict records, so it cannot disagree with
    the table): one row per claim (:func:`forest_rows`), headline rows first and starred, the claim id written
    above its row (so the axis keeps the whole width on a phone). The x axis is the
    distance from the prediction in band half-widths (symmetric-log beyond 2): the prediction is the dashed line at
    0, the measurement a marker whose shape and colour give the status (● passed, ◆ not resolvable, ■ failed, ✚ does
    not hold) with its band as a bar (one-sided for a bound), the falsifier a ✕ (a ▶ or ◀ at the edge when it lies beyond
    :data:`FOREST_LIMIT`); the critical value in standard errors ends each row ("+fl." when a systematic floor
    makes a tenth of the band or more). Returns the figure, or None when no record has a row."""
    rows = forest_rows(records)
    if not rows:
        return None
    use_book_style()
    n = len(rows)
    row_h = 0.44  # inches: the claim id above, the bar below
    height = 0.95 + row_h * n + (0.25 if title else 0.0)
    fig = plt.figure(figsize=(width, height))
    # the axes left of the critical values (right), in inches
    left, right = 0.12 / width, 1 - 0.8 / width
    bottom, top = 0.78 / height, 1 - (0.3 if title else 0.05) / height
    ax = fig.add_axes((left, bottom, right - left, top - bottom))
    lim = FOREST_LIMIT
    ax.set_xscale("symlog", linthresh=2.0, linscale=1.2)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(n - 0.35, -0.75)
    ax.axvline(0.0, color="0.2", lw=1.0, ls="--", zorder=1)
    ax.axvspan(-1, 1, color="0.92", zorder=0, lw=0)
    ax.grid(False)
    for y, row in enumerate(rows):
        x = float(np.clip(row["measured"], -lim, lim))
        marker, color, _ = STATUS_STYLE.get(row["status"], ("o", "0.4", row["status"]))
        lo, hi = max(row["lo"], -lim), min(row["hi"], lim)
        if row["side"] == "both":
            ax.plot([lo, hi], [y, y], color=color, lw=2.2, solid_capstyle="butt", zorder=2)
        else:  # a bound: solid over one band width, dotted on to the edge on the side it accepts
            near = row["measured"] - 1 if row["side"] == "upper" else row["measured"] + 1
            ax.plot(sorted([float(np.clip(near, -lim, lim)), x]), [y, y], color=color, lw=2.2,
                    solid_capstyle="butt", zorder=2)
            ax.plot([x, hi if row["side"] == "upper" else lo], [y, y], color=color, lw=1.4, ls=":", zorder=2)
        ax.plot([x], [y], marker=marker, ms=6.5, color=color, mfc=color if row["status"] != "not_resolvable" else "white",
                mew=1.6, zorder=3)
        f = row["falsifier"]
        if f is not None:
            if abs(f) <= lim:
                ax.plot([f], [y], marker="x", ms=6.5, mew=1.6, color="#7f3b8c", zorder=4)
            else:
                ax.plot([np.sign(f) * lim], [y], marker=">" if f > 0 else "<", ms=6, color="#7f3b8c", zorder=4,
                        clip_on=False)
        ax.text(1.03, y, _crit_text(row), transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=9)
        ax.text(0.01, y - 0.42, ("★ " if row["headline"] else "") + row["label"], transform=ax.get_yaxis_transform(),
                va="center", ha="left", fontsize=9, fontweight="bold" if row["headline"] else "normal",
                family="monospace", zorder=5,
                bbox=dict(facecolor="white", edgecolor="none", pad=0.6, alpha=0.85))
    ax.set_yticks([])
    ticks = [-10, -1, 0, 1, 10]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t).replace("-", "−") for t in ticks])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("(value − prediction) / band", fontsize=9)
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    present = [s for s in STATUS_STYLE if any(r["status"] == s for r in rows)]
    handles = [Line2D([], [], marker=STATUS_STYLE[s][0], color=STATUS_STYLE[s][1], lw=2.2, ms=6,
                      mfc="white" if s == "not_resolvable" else STATUS_STYLE[s][1], label=STATUS_STYLE[s][2])
               for s in present]
    handles.append(Line2D([], [], marker="x", ls="none", color="#7f3b8c", ms=6, mew=1.6, label="falsifier"))
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 0.0), ncol=len(handles), frameon=False,
               fontsize=9, handlelength=1.2, columnspacing=0.8, handletextpad=0.4, borderaxespad=0.1)
    return fig
