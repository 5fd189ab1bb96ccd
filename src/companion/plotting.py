"""Figure style shared by every notebook: static matplotlib, opaque white background (readable on the
dark theme too), consistent sizes and a colour cycle that survives greyscale printing."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt

__all__ = ["use_book_style", "new_figure", "COLORS"]

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]


def _register_png_formatter() -> None:
    """Make IPython render a Figure (also a glued one) as PNG whatever the matplotlib backend is (e.g.
    with MPLBACKEND=Agg in the environment, where the inline backend would not register it)."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # pragma: no cover - IPython and matplotlib-inline come with ipykernel
        return
    if get_ipython() is not None:
        set_matplotlib_formats("png")


def use_book_style() -> None:
    """Apply the book's rc settings (call once per notebook, in the set-up cell)."""
    _register_png_formatter()
    plt.rcParams.update(
        {
            "figure.facecolor": "white",
            "axes.facecolor": "white",
            "savefig.facecolor": "white",
            "savefig.transparent": False,
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "figure.figsize": (6.4, 4.0),
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": matplotlib.cycler(color=COLORS),
            "legend.frameon": False,
            "font.size": 10,
        }
    )


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 3.4, height: float = 3.0, **kw):
    """A figure with ``nrows x ncols`` panels of about ``width x height`` inches each (constrained layout)."""
    use_book_style()
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), layout="constrained", **kw)
    return fig, axes
