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

import io
import math
import textwrap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

# fonttype 42: TrueType fonts in PDF and PS files (journals refuse Type 3 fonts)
STYLE: dict[str, Any] = {"font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 120,
                         "pdf.fonttype": 42, "ps.fonttype": 42}
VECTOR_FORMATS = ("pdf", "svg")
# what an eval curve shows, said in the curve figures' captions (the tables show the final evaluation)
PROBE_NOTE = "train.eval_examples of the evaluation set; the tables show each run's final evaluation on all of it"
CHANCE = "chance"  # the chance line's legend entry (listed after the data's)
CAPTION_CHARS_PER_INCH = 17  # characters of 7-point text per inch of figure width


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

    def _repr_png_(self) -> bytes:
        """The figure as PNG: what Jupyter shows for a cell whose last line is a figure, with no ``%matplotlib
        inline`` first (that magic registers its own formatter for every Figure, which then takes precedence)."""
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


@contextmanager
def new_figure(style: dict[str, Any] | None = STYLE, **kwargs: Any) -> Iterator[StyledFigure]:
    """A new figure (``kwargs`` as for :class:`matplotlib.figure.Figure`; constrained layout unless given), to be
    drawn inside this context."""
    with matplotlib.rc_context(style):
        yield StyledFigure(style=style, **{"layout": "constrained", **kwargs})


def figure_legend(fig: Figure, axes: Iterable[Axes], loc: str = "outside right center", **kwargs: Any) -> Legend | None:
    """One legend for the whole figure, outside its panels (at the right, centred: at the top it would run into a
    long title): every labelled line, patch or collection of ``axes``, each label once, in the order drawn, the
    chance line last (seed 001's Figure 2 listed "chance" between 3 and 4 layers: only the last panel has 4). None
    when nothing is labelled."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if not handles:
        return None
    labels = sorted(handles, key=lambda label: label == CHANCE)  # stable: the data's entries keep their order
    return fig.legend([handles[label] for label in labels], labels, loc=loc, frameon=False, **kwargs)


def log_ticks(ax: Axes, axis: str = "y") -> None:
    """Enough labelled ticks on a log axis (drawn): where it spans fewer than two and a half powers of ten,
    matplotlib would label two or three of them; then 1, 2 and 5 × 10^k are labelled (every 1 … 9 × 10^k below
    one power of ten). A linear axis is left as it is."""
    if (ax.get_yscale() if axis == "y" else ax.get_xscale()) != "log":
        return
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if lo <= 0 or hi <= 0:
        return
    span = abs(math.log10(hi / lo))
    if span >= 2.5:
        return
    subs = (1.0, 2.0, 5.0) if span >= 1 else tuple(float(s) for s in range(1, 10))
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(math.inf, math.inf)))
    target.set_minor_formatter(NullFormatter())


def caption(fig: Figure, text: str, width: int | None = None, legend: Legend | None = None) -> None:
    """``text`` below the figure, at its left, wrapped at ``width`` characters (default: as many as the figure is
    wide): what the marks mean (bands, dashed lines, crosses), said where the reader looks. With ``legend`` (a
    figure legend below the panels) the text heads that legend instead: a figure's text cannot sit under such a
    legend, which a writer cropping to the drawn area moves to the crop's bottom edge."""
    width = width or max(40, int(fig.get_figwidth() * CAPTION_CHARS_PER_INCH))
    wrapped = literal("\n".join(textwrap.fill(part, width) for part in text.split("\n")))
    if legend is not None:
        legend.set_title(wrapped, prop={"size": 7})
        legend.get_title().set_color("0.25")
        legend.set_alignment("left")
        return
    fig.text(0.0, 0.0, wrapped, fontsize=7, va="top", ha="left", color="0.25")


def chance_line(ax: Axes, chance: float | None, label: str = CHANCE) -> None:
    """Chance level as a grey dashed line (labelled for the figure's legend); nothing when unknown."""
    if chance is not None and math.isfinite(chance):
        ax.axhline(chance, color="grey", ls="--", lw=0.8, label=label)


def save(fig: Figure, path: str | Path, vector: str | None = None) -> Path:
    """Write ``fig`` to ``path`` (PNG, SVG or PDF by the suffix; folders created), cropped to what it draws, and
    with ``vector`` ("pdf" or "svg") the same figure in that format next to it (``path`` with that suffix).
    Returns ``path``."""
    if vector is not None and vector not in VECTOR_FORMATS:
        raise ValueError(f"save: vector format {vector!r}; allowed: {', '.join(VECTOR_FORMATS)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target in dict.fromkeys([path, *([path.with_suffix(f".{vector}")] if vector else [])]):
        try:
            fig.savefig(target, bbox_inches="tight")
        except OSError as e:  # a full disk: the writer's error names no file; the partial file is removed
            with suppress(OSError):
                if target.is_file() and not target.is_symlink():  # never a device or a link's target
                    target.unlink()
            raise OSError(e.errno, e.strerror or str(e), str(target)) from None
    return path
