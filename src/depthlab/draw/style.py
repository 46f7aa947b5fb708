"""The figures' one style, text drawn as written, the shared legend, and the one way to write a figure to files.

Every drawing function builds its figure with the object-oriented API (no pyplot, no backend chosen: a
notebook's backend survives ``import depthlab``) inside :func:`new_figure` and returns it; :func:`save` writes
it. matplotlib reads its settings both when an artist is made and when the figure is drawn (how many ticks fit,
the labels of new ones), so a :class:`StyledFigure` keeps the settings it was made in and is drawn and written in
them.
Mathtext stays on, so log axes show real exponents; text that comes from data (task names, tokens, labels from
configs and plugins) goes through :func:`literal` and is drawn exactly as written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend

# fonttype 42: TrueType fonts in PDF and PS files (journals refuse Type 3 fonts)
STYLE: dict[str, Any] = {"font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 120,
                         "pdf.fonttype": 42, "ps.fonttype": 42}
VECTOR_FORMATS = ("pdf", "svg")


def literal(text: object) -> str:
    """``text`` as matplotlib draws it literally: every ``$`` escaped, so no part of it is parsed as mathtext."""
    return str(text).replace("$", r"\$")


class StyledFigure(Figure):
    """A figure written in the matplotlib settings it was made in (``style``; None: the current ones)."""

    def __init__(self, *args: Any, style: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.style = style
        super().__init__(*args, **kwargs)

    def savefig(self, *args: Any, **kwargs: Any) -> None:
        with matplotlib.rc_context(self.style):  # the writer's own settings too (fonts embedded in a PDF)
            super().savefig(*args, **kwargs)

    def draw(self, renderer: Any) -> None:
        with matplotlib.rc_context(self.style):  # drawn by a notebook, which does not call savefig
            super().draw(renderer)


@contextmanager
def new_figure(style: dict[str, Any] | None = STYLE, **kwargs: Any) -> Iterator[StyledFigure]:
    """A new figure (``kwargs`` as for :class:`matplotlib.figure.Figure`; constrained layout unless given), to be
    drawn inside this context."""
    with matplotlib.rc_context(style):
        yield StyledFigure(style=style, **{"layout": "constrained", **kwargs})


def figure_legend(fig: Figure, axes: Iterable[Axes], loc: str = "outside right upper", **kwargs: Any) -> Legend | None:
    """One legend for the whole figure, outside its panels: every labelled line, patch or collection of ``axes``,
    each label once, in the order drawn. None when nothing is labelled."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if not handles:
        return None
    return fig.legend(list(handles.values()), list(handles), loc=loc, frameon=False, **kwargs)


def whole_decades(ax: Axes) -> None:
    """A log y axis (drawn) that would show fewer than two powers of ten widened to the powers of ten around it:
    its labels are then 10^k alone, where matplotlib would otherwise label 2×10^k, 3×10^k … between them."""
    lo, hi = ax.get_ylim()
    if ax.get_yscale() != "log" or lo <= 0 or math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) >= 1:
        return
    ax.set_ylim(10.0 ** math.floor(math.log10(lo)), 10.0 ** math.ceil(math.log10(hi)))


def save(fig: Figure, path: str | Path, vector: str | None = None) -> Path:
    """Write ``fig`` to ``path`` (PNG, SVG or PDF by the suffix; folders created), cropped to what it draws, and
    with ``vector`` ("pdf" or "svg") the same figure in that format next to it (``path`` with that suffix).
    Returns ``path``."""
    if vector is not None and vector not in VECTOR_FORMATS:
        raise ValueError(f"save: vector format {vector!r}; allowed: {', '.join(VECTOR_FORMATS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target in dict.fromkeys([path, *([path.with_suffix(f".{vector}")] if vector else [])]):
        fig.savefig(target, bbox_inches="tight")
    return path
