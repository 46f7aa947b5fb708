"""The drawing layer: every figure of depthlab, drawn from the data the analyses compute.

A module per subject returns matplotlib figures (``depth``: seed 001 Figure 2; ``attention_maps``: attention maps;
``capability``: the minimum-depth heat map; ``lengths``, ``layers``, ``emergence``, ``circuit``, ``induction``,
``llm``, ``widths``), and :func:`save` writes any of them (PNG, SVG or PDF; with ``vector``, a PDF or SVG next to
the PNG). ``svg`` draws the HTML report's inline-SVG heat maps and line charts, ``curves`` its training curves.
``style`` holds the one style, the figure that keeps it (``new_figure``), :func:`literal` (text from data drawn as
written, never as mathtext), the one legend of a figure of several panels, and :func:`save`. No module chooses a
matplotlib backend. :func:`attention` (``depthlab.draw.attention(cache, tokens)``) draws one example's attention
from a ``run_with_cache`` cache: every layer and head, the tokens on the axes, a colour bar.
"""

from .attention_maps import attention
from .style import STYLE, literal, save

__all__ = ["STYLE", "attention", "literal", "save"]
