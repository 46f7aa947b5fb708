"""The drawing layer: every figure of depthlab, drawn from the data the analyses compute.

A module per subject returns matplotlib figures (``depth``: seed 001 Figure 2; ``attention``: attention maps;
``capability``: the minimum-depth heat map; ``lengths``, ``layers``, ``emergence``, ``circuit``, ``induction``,
``llm``, ``widths``), and :func:`save` writes any of them (PNG, SVG or PDF). ``svg`` draws the HTML report's
inline-SVG heat maps and line charts, ``curves`` its training curves. ``style`` holds the one style, the figure
that keeps it (``new_figure``) and :func:`save`.
"""

from .style import STYLE, save

__all__ = ["STYLE", "save"]
