"""Small inline-SVG plots for the HTML report: a heat map and a line chart, nothing else.

Every style is a presentation attribute on the element (no class needing the page's stylesheet), so a figure
serialized by the page's "SVG" button, or drawn to a canvas for "PNG", looks the same outside the page.
Every piece of text goes through :func:`esc`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
INK = "#1f2328"
MUTED = "#656d76"
GRID = "#e6e8eb"
CHANCE = "#cf222e"

# matplotlib's viridis at 0, 1/8, …, 1 (the paper figures use it too, see depthlab.draw.depth).
_VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"]

NEAR_CHANCE = 0.02  # an accuracy at most this far above chance is drawn hatched: nothing learned


def esc(text: Any) -> str:
    """Text made safe for HTML and SVG content and attribute values."""
    return html.escape(str(text), quote=True)


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16)


def viridis(t: float) -> str:
    """The viridis colour at ``t`` in [0, 1] (clipped), as ``#rrggbb``."""
    t = min(max(float(t), 0.0), 1.0) * (len(_VIRIDIS) - 1)
    i = min(int(t), len(_VIRIDIS) - 2)
    a, b = _rgb(_VIRIDIS[i]), _rgb(_VIRIDIS[i + 1])
    f = t - i
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on ``background``."""
    r, g, b = _rgb(background)
    return INK if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


def depth_colours(n: int) -> list[str]:
    """One colour per depth, the same spread of viridis as ``depthlab.draw.depth.depth_figure``."""
    if n <= 1:
        return [viridis(0.1)]
    return [viridis(0.1 + 0.75 * i / (n - 1)) for i in range(n)]


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{digits}f}"


def loss_text(x: float | None) -> str:
    """A loss with 3 significant digits (losses span many decades)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    ticks, x = [], start
    while x <= hi + step * 1e-9:
        ticks.append(round(x, 12))
        x += step
    return ticks


def _power_label(x: float) -> str:
    """``1e-3``, ``2e-3``: a log axis' tick outside 0.01 … 1000."""
    e = math.floor(math.log10(x) + 1e-9)
    m = round(x / 10.0**e, 6)
    return f"{m:g}e{e}"


def _tick_label(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 10_000:
        return f"{x / 1000:g}k"
    return f"{x:g}"


def svg_open(width: float, height: float, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
            f'viewBox="0 0 {width:g} {height:g}" font-family="{esc(FONT)}" font-size="11" fill="{INK}" '
            f'role="img" aria-label="{esc(label)}"><rect width="100%" height="100%" fill="#ffffff"/>')


# ----------------------------------------------------------------------------------------- heat map


@dataclass
class Cell:
    """One heat-map cell: a value in [0, 1] (None: no finished run), what the tooltip says, and where it links."""

    row: int
    col: int
    value: float | None
    text: str
    tip: str
    href: str
    key: str
    chance: float | None = None
    attrs: dict[str, str] = field(default_factory=dict)


def heatmap_svg(rows: Sequence[str], cols: Sequence[str], cells: Sequence[Cell], title: str,
                row_notes: Sequence[str] | None = None, cell_w: float = 118, cell_h: float = 52,
                uid: str = "hm") -> str:
    """A table-like heat map: a row per ``rows`` label, a column per ``cols`` label, a colour bar at the right.

    A cell's colour is its value (viridis, 0 to 1); a red tick on the thin gauge at its foot marks the row's
    chance level, and a cell not above chance is hatched. Cells are links (``href``) with ``data-tip`` tooltips.
    ``uid`` prefixes the SVG's internal ids (several heat maps share a page).
    """
    label_w = max(90.0, 7.5 * max((len(r) for r in rows), default=4) + 16)
    note_w = 70.0 if row_notes else 0.0
    top, left = 40.0, label_w
    width = left + cell_w * len(cols) + note_w + 70
    height = top + cell_h * len(rows) + 14
    out = [svg_open(width, height, title),
           f'<defs><pattern id="{uid}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#ffffff" '
           'stroke-opacity="0.55" stroke-width="2"/></pattern></defs>',
           f'<text x="{left:g}" y="14" font-weight="600" font-size="12">{esc(title)}</text>']
    for j, col in enumerate(cols):
        out.append(f'<text x="{left + cell_w * (j + 0.5):g}" y="{top - 8:g}" text-anchor="middle" '
                   f'fill="{MUTED}">{esc(col)}</text>')
    if row_notes:
        out.append(f'<text x="{left + cell_w * len(cols) + note_w / 2:g}" y="{top - 8:g}" text-anchor="middle" '
                   f'fill="{MUTED}">chance</text>')
    for i, row in enumerate(rows):
        y = top + cell_h * (i + 0.5) + 4
        out.append(f'<text x="{left - 8:g}" y="{y:g}" text-anchor="end" font-size="12.5">{esc(row)}</text>')
        if row_notes:
            out.append(f'<text x="{left + cell_w * len(cols) + note_w / 2:g}" y="{y:g}" text-anchor="middle" '
                       f'fill="{CHANCE}">{esc(row_notes[i])}</text>')
    for c in cells:
        x, y = left + cell_w * c.col, top + cell_h * c.row
        colour = viridis(c.value) if c.value is not None else "#d0d7de"
        ink = text_colour(colour)
        extra = "".join(f' {esc(k)}="{esc(v)}"' for k, v in c.attrs.items())
        out.append(f'<a href="{esc(c.href)}" class="cell" data-key="{esc(c.key)}" data-tip="{esc(c.tip)}"{extra}>'
                   f'<title>{esc(c.tip)}</title>'
                   f'<rect x="{x + 1:g}" y="{y + 1:g}" width="{cell_w - 2:g}" height="{cell_h - 2:g}" rx="3" '
                   f'fill="{colour}"/>')
        at_chance = c.value is not None and c.chance is not None and c.value <= c.chance + NEAR_CHANCE
        if at_chance:
            out.append(f'<rect x="{x + 1:g}" y="{y + 1:g}" width="{cell_w - 2:g}" height="{cell_h - 2:g}" rx="3" '
                       f'fill="url(#{uid}-hatch)"/>')
        out.append(f'<text x="{x + cell_w / 2:g}" y="{y + cell_h / 2 + 1:g}" text-anchor="middle" fill="{ink}" '
                   f'font-size="13">{esc(c.text)}</text>')
        if c.chance is not None:  # gauge: accuracy bar with a tick at chance
            gx, gw, gy = x + 8, cell_w - 16, y + cell_h - 9
            out.append(f'<rect x="{gx:g}" y="{gy:g}" width="{gw:g}" height="3" fill="{ink}" fill-opacity="0.25"/>')
            if c.value is not None:
                out.append(f'<rect x="{gx:g}" y="{gy:g}" width="{gw * min(max(c.value, 0), 1):.1f}" height="3" '
                           f'fill="{ink}" fill-opacity="0.8"/>')
            cx = gx + gw * min(max(c.chance, 0), 1)
            out.append(f'<rect x="{cx - 1:.1f}" y="{gy - 3:g}" width="2" height="9" fill="{CHANCE}"/>')
        out.append("</a>")
    # colour bar
    bx, bh = left + cell_w * len(cols) + note_w + 18, max(cell_h * len(rows), 60)
    out.append(f'<defs><linearGradient id="{uid}-cbar" x1="0" y1="1" x2="0" y2="0">'
               + "".join(f'<stop offset="{i / 8:g}" stop-color="{c}"/>' for i, c in enumerate(_VIRIDIS))
               + "</linearGradient></defs>")
    out.append(f'<rect x="{bx:g}" y="{top:g}" width="10" height="{bh:g}" fill="url(#{uid}-cbar)"/>')
    for t in (0, 0.5, 1):
        ty = top + bh * (1 - t)
        out.append(f'<text x="{bx + 14:g}" y="{ty + 4:g}" fill="{MUTED}">{t:g}</text>')
    out.append(f'<text x="{bx - 4:g}" y="{top - 8:g}" fill="{MUTED}">accuracy</text>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------------------- line chart


@dataclass
class Series:
    """A line (``y`` against ``x``), optionally with a band from ``lo`` to ``hi`` (the spread over seeds)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    colour: str
    lo: Sequence[float] | None = None
    hi: Sequence[float] | None = None
    dash: str | None = None
    width: float = 1.8
    opacity: float = 1.0
    legend: bool = True


def _finite(v: Any, log: bool) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(v) and (not log or v > 0)


def line_chart_svg(series: Sequence[Series], title: str, x_label: str = "step", y_label: str = "",
                   y_range: tuple[float, float] | None = None, log_y: bool = False, hline: float | None = None,
                   hline_label: str = "chance", width: float = 340, height: float = 220) -> str:
    """A line chart with axes, grid, optional log y axis, an optional dashed line (chance) and a legend."""
    left, right, top, bottom = 48.0, 18.0, 22.0, 36.0
    # The legend goes in rows under the title, above the plot (never over the lines).
    legend_at: list[tuple[float, float, Series]] = []
    x, row = left, 0
    for s in (s for s in series if s.legend):
        w = len(s.label) * 5.8 + 24
        if x + w > width - right and x > left:
            x, row = left, row + 1
        legend_at.append((x, top + 8 + 13 * row, s))
        x += w
    if legend_at:
        top += 13 * (row + 1) + 2
    pw, ph = width - left - right, height - top - bottom
    xs = [x for s in series for x, y in zip(s.x, s.y, strict=False) if _finite(y, log_y) and _finite(x, False)]
    ys = [v for s in series for seq in (s.y, s.lo or [], s.hi or []) for v in seq if _finite(v, log_y)]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x1 <= x0:
        x1 = x0 + 1
    if y_range is not None:
        y0, y1 = y_range
    elif ys:
        y0, y1 = min(ys), max(ys)
        if log_y:
            y0, y1 = 10 ** math.floor(math.log10(y0)), 10 ** math.ceil(math.log10(y1))
        if y1 <= y0:
            y0, y1 = (y0 / 10, y0 * 10) if log_y else (y0 - 0.5, y0 + 0.5)
    else:
        y0, y1 = (0.1, 1.0) if log_y else (0.0, 1.0)

    def tx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def ty(y: float) -> float:
        f = (math.log10(y / y0) / math.log10(y1 / y0)) if log_y else (y - y0) / (y1 - y0)
        return top + (1 - f) * ph

    out = [svg_open(width, height, title),
           f'<text x="{left:g}" y="14" font-weight="600" font-size="12">{esc(title)}</text>']
    if log_y:
        decades = range(math.floor(math.log10(y0)), math.ceil(math.log10(y1)) + 1)
        subs = (1, 2, 5) if len(decades) <= 3 else (1,)  # two or three decades: 1, 2, 5 × 10^k, enough to read
        yticks = [m * 10.0**e for e in decades for m in subs]
        if len(yticks) > 6 and len(subs) == 1:
            yticks = yticks[:: math.ceil(len(yticks) / 6)]
    else:
        yticks = nice_ticks(y0, y1, 5)
    for t in yticks:
        if not (y0 - 1e-12 <= t <= y1 + 1e-12):
            continue
        y = ty(t)
        out.append(f'<line x1="{left:g}" x2="{left + pw:g}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        label = _power_label(t) if log_y and not (0.01 <= t <= 1000) else _tick_label(t)
        out.append(f'<text x="{left - 5:g}" y="{y + 3.5:.1f}" text-anchor="end" fill="{MUTED}">{esc(label)}</text>')
    for t in nice_ticks(x0, x1, 5):
        x = tx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph:g}" y2="{top + ph + 4:g}" stroke="{MUTED}"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 15:g}" text-anchor="middle" fill="{MUTED}">'
                   f'{esc(_tick_label(t))}</text>')
    out.append(f'<path d="M{left:g},{top:g}V{top + ph:g}H{left + pw:g}" fill="none" stroke="{MUTED}"/>')
    out.append(f'<text x="{left + pw / 2:g}" y="{height - 4:g}" text-anchor="middle" fill="{MUTED}">'
               f'{esc(x_label)}</text>')
    if y_label:
        out.append(f'<text transform="translate(12 {top + ph / 2:g}) rotate(-90)" text-anchor="middle" '
                   f'fill="{MUTED}">{esc(y_label)}</text>')
    if hline is not None and _finite(hline, log_y) and y0 <= hline <= y1:
        y = ty(hline)
        out.append(f'<line x1="{left:g}" x2="{left + pw:g}" y1="{y:.1f}" y2="{y:.1f}" stroke="{CHANCE}" '
                   f'stroke-dasharray="4 3" stroke-width="1"/>')
        out.append(f'<text x="{left + pw - 2:g}" y="{y - 3:.1f}" text-anchor="end" fill="{CHANCE}" '
                   f'font-size="10">{esc(hline_label)}</text>')

    def clip(v: float) -> float:
        return min(max(v, y0), y1)

    for s in series:
        if s.lo is not None and s.hi is not None:
            pts = [(x, lo, hi) for x, lo, hi in zip(s.x, s.lo, s.hi, strict=False)
                   if _finite(lo, log_y) and _finite(hi, log_y)]
            if len(pts) > 1:
                upper = " ".join(f"{tx(x):.1f},{ty(clip(hi)):.1f}" for x, _, hi in pts)
                lower = " ".join(f"{tx(x):.1f},{ty(clip(lo)):.1f}" for x, lo, _ in reversed(pts))
                out.append(f'<polygon points="{upper} {lower}" fill="{s.colour}" fill-opacity="0.18" stroke="none"/>')
        segments: list[list[str]] = [[]]
        for x, y in zip(s.x, s.y, strict=False):
            if _finite(y, log_y):
                segments[-1].append(f"{tx(x):.1f},{ty(clip(y)):.1f}")
            elif segments[-1]:
                segments.append([])
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        for seg in segments:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{s.colour}"/>')
            elif seg:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{s.colour}" '
                           f'stroke-width="{s.width:g}" stroke-opacity="{s.opacity:g}" stroke-linejoin="round"{dash}/>')
    for x, y, s in legend_at:
        out.append(_legend_item(s, x, y))
    out.append("</svg>")
    return "".join(out)


def _legend_item(s: Series, x: float, y: float) -> str:
    dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
    return (f'<line x1="{x:.1f}" x2="{x + 14:.1f}" y1="{y - 3.5:g}" y2="{y - 3.5:g}" stroke="{s.colour}" '
            f'stroke-width="2"{dash}/><text x="{x + 18:.1f}" y="{y:g}" font-size="10">{esc(s.label)}</text>')


def grid_svg(charts: Sequence[str], cols: int, cell_w: float, cell_h: float, title: str = "") -> str:
    """Several charts (each a full ``<svg>`` of size ``cell_w`` × ``cell_h``) side by side in one SVG."""
    top = 22.0 if title else 0.0
    rows = math.ceil(len(charts) / max(cols, 1))
    out = [svg_open(cell_w * cols, top + cell_h * rows, title)]
    if title:
        out.append(f'<text x="8" y="15" font-weight="600" font-size="13">{esc(title)}</text>')
    for i, chart in enumerate(charts):
        x, y = cell_w * (i % cols), top + cell_h * (i // cols)
        out.append(chart.replace("<svg ", f'<svg x="{x:g}" y="{y:g}" ', 1))
    out.append("</svg>")
    return "".join(out)
