"""Small inline SVG charts: horizontal bars, histograms, a heatmap. No plotting library needed.

Each function returns an ``<svg>`` string whose colours come from CSS classes
(so the page's light and dark themes apply); every label goes through
:func:`~dsclean.report.safe.esc`; each bar carries a ``<title>`` tooltip.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from .safe import esc


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


def human_pixels(n: float) -> str:
    return f"{n:,.0f}"


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(label)}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def hbars(rows: Sequence[tuple[str, Sequence[int]]], series: Sequence[str], label: str, width: int = 640) -> str:
    """One row per label, stacked series (classes: kept + bad). Bars are scaled to the largest total."""
    bar_h, gap, left, right = 16, 4, min(220, 12 + 7 * max((len(r[0]) for r in rows), default=4)), 70
    height = len(rows) * (bar_h + gap) + gap
    top = max((sum(v) for _, v in rows), default=1) or 1
    scale = (width - left - right) / top
    body = []
    for i, (name, values) in enumerate(rows):
        y = gap + i * (bar_h + gap)
        shown = name if len(name) <= 30 else name[:29] + "…"
        body.append(f'<text class="lbl" x="{left - 6}" y="{y + bar_h - 4}" text-anchor="end">{esc(shown)}</text>')
        x = left
        for s, v in zip(series, values):
            if v:
                w = max(1.0, v * scale)
                tip = f"{name}: {v:,} {s}"
                body.append(
                    f'<rect class="bar s-{esc(s)}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}">'
                    f"<title>{esc(tip)}</title></rect>"
                )
                x += w
        total = sum(values)
        body.append(f'<text class="num" x="{x + 4:.1f}" y="{y + bar_h - 4}">{total:,}</text>')
    return _svg(width, height, body, label)


def histogram(
    edges: Sequence[float],
    counts: Sequence[int],
    fmt: Callable[[float], str],
    label: str,
    unit: str = "",
    width: int = 480,
    height: int = 170,
) -> str:
    """Vertical bars over (log-spaced) bins; empty bins at both ends are trimmed."""
    nz = [i for i, c in enumerate(counts) if c]
    if not nz:
        return ""
    lo, hi = nz[0], nz[-1] + 1
    edges, counts = list(edges[lo : hi + 1]), list(counts[lo:hi])
    left, bottom, top_pad = 56, 26, 8
    plot_w, plot_h = width - left - 10, height - bottom - top_pad
    peak = max(counts)
    bw = plot_w / len(counts)
    body = [
        f'<line class="axis" x1="{left}" y1="{top_pad + plot_h}" x2="{width - 10}" y2="{top_pad + plot_h}"/>',
        f'<text class="num" x="{left - 6}" y="{top_pad + 10}" text-anchor="end">{peak:,}</text>',
        f'<text class="num" x="{left - 6}" y="{top_pad + plot_h}" text-anchor="end">0</text>',
    ]
    for i, c in enumerate(counts):
        if not c:
            continue
        h = max(1.0, c / peak * plot_h)
        x = left + i * bw
        tip = f"{fmt(edges[i])} – {fmt(edges[i + 1])}{unit}: {c:,}"
        body.append(
            f'<rect class="bar" x="{x + 0.5:.1f}" y="{top_pad + plot_h - h:.1f}" width="{max(1.0, bw - 1):.1f}" '
            f'height="{h:.1f}"><title>{esc(tip)}</title></rect>'
        )
    ticks = max(1, math.ceil(len(edges) / 7))
    for i in range(0, len(edges), ticks):
        x = left + i * bw
        body.append(
            f'<text class="tick" x="{x:.1f}" y="{height - 8}" text-anchor="middle">{esc(fmt(edges[i]) + unit)}</text>'
        )
    return _svg(width, height, body, label)


def columns(values: dict, fmt: Callable[[object], str], label: str, width: int = 480, height: int = 150) -> str:
    """One bar per distinct value (sample rates, channel counts), in order."""
    if not values:
        return ""
    items = list(values.items())[:40]
    left, bottom, top_pad = 56, 26, 8
    plot_w, plot_h = width - left - 10, height - bottom - top_pad
    peak = max(v for _, v in items)
    bw = min(60.0, plot_w / len(items))
    body = [
        f'<line class="axis" x1="{left}" y1="{top_pad + plot_h}" x2="{width - 10}" y2="{top_pad + plot_h}"/>',
        f'<text class="num" x="{left - 6}" y="{top_pad + 10}" text-anchor="end">{peak:,}</text>',
    ]
    for i, (k, v) in enumerate(items):
        h = max(1.0, v / peak * plot_h)
        x = left + i * bw
        body.append(
            f'<rect class="bar" x="{x + 2:.1f}" y="{top_pad + plot_h - h:.1f}" width="{bw - 4:.1f}" height="{h:.1f}">'
            f"<title>{esc(f'{fmt(k)}: {v:,}')}</title></rect>"
        )
        body.append(
            f'<text class="tick" x="{x + bw / 2:.1f}" y="{height - 8}" text-anchor="middle">{esc(fmt(k))}</text>'
        )
    return _svg(width, height, body, label)


def heatmap(
    xedges: Sequence[float],
    yedges: Sequence[float],
    counts: Sequence[Sequence[int]],
    label: str,
    xname: str = "width",
    yname: str = "height",
    size: int = 340,
) -> str:
    """A 2-D histogram (counts[y][x]) on log axes; cell darkness is the log of its count."""
    rows = [i for i, r in enumerate(counts) if any(r)]
    cols = [j for j in range(len(counts[0])) if any(r[j] for r in counts)] if counts else []
    if not rows or not cols:
        return ""
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    n = max(r1 - r0, c1 - c0)
    left, bottom, pad = 52, 36, 12  # pad: room for the top and right tick labels
    cell = (size - left - pad) / n
    peak = math.log1p(max(max(r) for r in counts))
    body = []
    for i in range(r0, r1):
        for j in range(c0, c1):
            c = counts[i][j]
            if not c:
                continue
            x, y = left + (j - c0) * cell, pad + (n - 1 - (i - r0)) * cell
            level = 0.15 + 0.85 * math.log1p(c) / peak
            tip = (
                f"{xname} {human_pixels(xedges[j])}–{human_pixels(xedges[j + 1])}, "
                f"{yname} {human_pixels(yedges[i])}–{human_pixels(yedges[i + 1])}: {c:,}"
            )
            body.append(
                f'<rect class="cell" x="{x:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                f'fill-opacity="{level:.2f}"><title>{esc(tip)}</title></rect>'
            )
    plot = n * cell
    base = pad + plot
    for k in range(0, n + 1, max(1, n // 4)):
        if c0 + k < len(xedges):
            body.append(
                f'<text class="tick" x="{left + k * cell:.1f}" y="{base + 14:.1f}" text-anchor="middle">'
                f"{esc(human_pixels(xedges[c0 + k]))}</text>"
            )
        if r0 + k < len(yedges):
            body.append(
                f'<text class="tick" x="{left - 4}" y="{base - k * cell + 4:.1f}" text-anchor="end">'
                f"{esc(human_pixels(yedges[r0 + k]))}</text>"
            )
    body.append(
        f'<text class="lbl" x="{left + plot / 2:.1f}" y="{base + 30:.1f}" text-anchor="middle">{esc(xname)} (px)</text>'
    )
    body.append(
        f'<text class="lbl" x="12" y="{pad + plot / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {pad + plot / 2:.1f})">{esc(yname)} (px)</text>'
    )
    body.append(f'<line class="axis" x1="{left}" y1="{base:.1f}" x2="{left + plot:.1f}" y2="{base:.1f}"/>')
    return _svg(size, int(base + bottom), body, label)
