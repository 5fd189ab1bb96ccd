"""The plotting helpers the mesa results share, in the book's one style (:mod:`companion.plotting`).

Each figure of a mesa page lives in the module of its result (:mod:`companion.mesa.results`); what they share
is here: trained curves are wide and translucent (:data:`TRAINED`), the population theory a thin black dashed
line drawn on top (:data:`POPULATION`), so that both stay visible where they coincide; legends sit outside
the data (:func:`companion.plotting.legend_outside`); :func:`glue_figure` hands a figure to its page.
"""

from __future__ import annotations

__all__ = ["TRAINED", "POPULATION", "glue_figure", "plain_log_ticks", "init_label"]

TRAINED = dict(lw=2.4, alpha=0.55)  #: trained runs: wide, translucent
POPULATION = dict(color="k", ls=(0, (2, 2)), lw=1.0)  #: population GD: thin, dashed, on top


def glue_figure(name: str, fig) -> None:
    """Glue a figure under ``name`` for a ``{glue:figure}`` directive and close it."""
    import matplotlib.pyplot as plt  # the plotting stack, loaded only by a page that draws
    from myst_nb import glue

    glue(name, fig, display=False)
    plt.close(fig)


def plain_log_ticks(ax, values) -> None:
    """Label a log x axis at ``values`` only, in plain numbers (no crowded minor labels)."""
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())


def init_label(ini) -> str:
    """The legend label of a diagonal init (a0, b0)."""
    return f"init ({ini[0]:g}, {ini[1]:g})"
