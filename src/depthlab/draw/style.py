"""The figures' one style and the one way to write a figure to a file.

Every drawing function builds its figure with the object-oriented API (no pyplot, no backend chosen: a
notebook's backend survives ``import depthlab``) inside :func:`new_figure` and returns it; :func:`save` writes
it. matplotlib reads its settings both when an artist is made and when the figure is drawn (how many ticks fit,
the labels of new ones), so a :class:`StyledFigure` keeps the settings it was made in and is written in them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

# parse_math off: labels from configs (task names, tokens) are drawn as written, never as mathtext
STYLE: dict[str, Any] = {"text.parse_math": False, "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "figure.dpi": 120}


class StyledFigure(Figure):
    """A figure written in the matplotlib settings it was made in (``style``; None: the current ones)."""

    def __init__(self, *args: Any, style: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.style = style
        super().__init__(*args, **kwargs)

    def savefig(self, *args: Any, **kwargs: Any) -> None:
        with matplotlib.rc_context(self.style):
            super().savefig(*args, **kwargs)


@contextmanager
def new_figure(style: dict[str, Any] | None = STYLE, **kwargs: Any) -> Iterator[StyledFigure]:
    """A new figure (``kwargs`` as for :class:`matplotlib.figure.Figure`), to be drawn inside this context."""
    with matplotlib.rc_context(style):
        yield StyledFigure(style=style, **kwargs)


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (PNG, SVG or PDF by the suffix; folders created), cropped to what it draws."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path
