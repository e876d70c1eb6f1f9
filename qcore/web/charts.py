"""Inline SVG charts for the dashboard.

Latency lines, throughput columns, the per-queue completed/failed split bar and table-cell
sparklines.

Every function is pure and returns an ``<svg>`` string that the page embeds as is (the
caller marks it safe for Jinja2), so all text placed in it is escaped here.

The board is served with a Content-Security-Policy that forbids inline styles and inline
scripts. So nothing here emits a ``style`` attribute, a ``<style>`` or a ``<script>``
element: shapes carry SVG presentation attributes (fill, stroke, stroke-dasharray,
opacity, font-size, text-anchor) for a readable fallback, and ``class`` names that the
site's stylesheet colours (a stylesheet rule beats a presentation attribute). Series
paths and legend entries carry ``data-series`` so the board's script file can toggle them.
"""

from __future__ import annotations

import datetime as dt
import html
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "EMPTY_TEXT",
    "Series",
    "format_duration_ms",
    "line_chart",
    "sparkline",
    "split_bar",
    "split_widths",
    "throughput_chart",
]

EMPTY_TEXT = "no data in this range"
MIN_SEGMENT = 0.01  # a non-zero split-bar segment is never narrower than 1 % of the track
_UTC = dt.timezone.utc
_NS = "http://www.w3.org/2000/svg"
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 22, 38  # plot margins: y labels, -, axis title, x+legend
_DAY = 86_400
_TIME_STEPS = (
    *(1, 2, 5, 10, 15, 30),
    *(60 * m for m in (1, 2, 5, 10, 15, 20, 30)),
    *(3600 * h for h in (1, 2, 3, 4, 6, 8, 12)),
    *(_DAY * d for d in (1, 2, 3, 4, 7, 14, 30, 60, 90, 180, 365)),
)
_DURATION_UNITS = ((_DAY * 1000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))
#: a log axis of durations is labelled at these round ones (ms), not at powers of ten:
#: "1 min", never "1.67 min"
_ROUND_DURATIONS_MS = (
    0.1, 1, 10, 100, 1000, 10_000, 60_000, 600_000, 3_600_000, 6 * 3_600_000,
    _DAY * 1000, 7 * _DAY * 1000, 30 * _DAY * 1000, 365 * _DAY * 1000,
)  # fmt: skip
_COMPLETED_FILL, _FAILED_FILL = "#2e7d32", "#c62828"  # fallbacks; CSS classes override
_GAUGE_DASH = "6 4"  # a dashed series (the queue-age gauge); a filling segment is "4 3"
_FILLING_COLUMN = ' stroke="currentColor" stroke-dasharray="3 2" fill-opacity="0.5"'

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    """One line of a :func:`line_chart`."""

    name: str  # legend text, e.g. "p95 run"
    points: list[tuple[dt.datetime, float | None]]  # oldest first; None = no value (gap)
    css: str = "s1"  # class on the path: "s1".."s7", "completed", "failed"
    hidden: bool = False  # drawn, but with class "off" (the board's script toggles it)
    filling: bool = False  # the last point's bucket is still filling: dashed last segment
    dashed: bool = False  # drawn dashed throughout (a gauge beside the percentiles)

    @property
    def classes(self) -> str:
        """The classes of its path and legend swatch ("dashed" for a dashed series)."""
        return self.css + (" dashed" if self.dashed else "")


def format_duration_ms(value: float) -> str:
    """A duration given in milliseconds, compactly: "0.5 ms", "12 ms", "1.5 s", "1.5 min"."""
    for size, name in _DURATION_UNITS:
        if abs(value) >= size:
            return f"{_num(value / size)} {name}"
    return f"{_num(value)} ms"


def line_chart(
    series: list[Series],
    *,
    title: str,
    unit: str = "",
    log_scale: bool = False,
    width: int = 720,
    height: int = 240,
) -> str:
    """Lines over time, one per series.

    A ``None`` value (or, on a log axis, a value ≤ 0) is a gap. The y axis is linear from
    0 to a nice max, or logarithmic over decades.
    """

    def usable(v: float | None) -> bool:
        return v is not None and math.isfinite(v) and (v > 0 or not log_scale)

    stamps = [_ts(t) for s in series for t, _ in s.points]
    values = [v for s in series for _, v in s.points if v is not None and usable(v)]
    if not values:
        return _empty("line-chart", title, width, height)
    left, right, top, bottom = _LEFT, width - _RIGHT, _TOP, height - _BOTTOM
    t0, t1 = min(stamps), max(stamps)
    x = _x_scale(t0, t1, left, right)
    parts = _open("line-chart", title, width, height)

    def fmt(v: float) -> str:
        if unit == "ms":
            return format_duration_ms(v)
        return f"{_num(v)} {unit}" if unit else _num(v)

    if log_scale:
        lo = math.floor(math.log10(min(values)))
        hi = max(math.ceil(math.log10(max(values))), lo + 1)

        def y(v: float) -> float:
            return bottom - (math.log10(v) - lo) / (hi - lo) * (bottom - top)

        if unit == "ms":  # round durations within the decades shown
            ladder = [d for d in _ROUND_DURATIONS_MS if 10.0**lo <= d <= 10.0**hi]
        else:
            ladder = [10.0**k for k in range(lo, hi + 1)]
        ticks = ladder[:: math.ceil(len(ladder) / 7)]  # at most ~7 labels
        axis_title = f"{unit}, log scale" if unit else "log scale"
    else:
        y_max = _nice_max(max(values))

        def y(v: float) -> float:
            return bottom - v / y_max * (bottom - top)

        ticks = _ticks(y_max)
        axis_title = unit
    if axis_title:
        parts.append(
            f'<text class="axis-title" x="4" y="12" font-size="11">{_esc(axis_title)}</text>'
        )
    _y_axis(parts, [(y(v), fmt(v)) for v in ticks], left, right)
    _x_axis(parts, _time_ticks(t0, t1), t1 - t0, x, right, bottom)

    for s in series:
        name = _esc(s.name)
        cls = _esc(s.classes) + (" off" if s.hidden else "")
        coords = [(x(_ts(t)), y(v)) if v is not None and usable(v) else None for t, v in s.points]
        last_two = coords[-2:]
        dashed = s.filling and len(last_two) == 2 and None not in last_two
        d = _path_d(_runs(coords[:-1] if dashed else coords))
        line = f'fill="none" stroke="currentColor" stroke-width="1.5" data-series="{name}"'
        if d:
            dash = f' stroke-dasharray="{_GAUGE_DASH}"' if s.dashed else ""
            parts.append(f'<path class="line {cls}" d="{d}" {line}{dash}/>')
        if dashed:
            seg = _path_d([[p for p in last_two if p is not None]])
            parts.append(
                f'<path class="line {cls} filling" d="{seg}" {line} stroke-dasharray="4 3"/>'
            )
        lone = {p for run in _runs(coords) if len(run) == 1 for p in run}
        parts.append(f'<g class="pts {cls}" data-series="{name}">')
        for i, ((t, v), p) in enumerate(zip(s.points, coords, strict=True)):
            if p is None or v is None:
                continue
            extra = (" lone" if p in lone else "") + (
                " filling" if s.filling and i == len(coords) - 1 else ""
            )
            tip = _esc(f"{s.name} · {_when(t)} · {fmt(v)}")
            parts.append(
                f'<circle class="pt {cls}{extra}" cx="{_n(p[0])}" cy="{_n(p[1])}" r="2.5" '
                f'fill="currentColor" fill-opacity="{1 if p in lone else 0}">'
                f"<title>{tip}</title></circle>"
            )
        parts.append("</g>")
    _legend(parts, [(s.name, s.classes, s.hidden) for s in series], left, height - 8)
    parts.append("</svg>")
    return "".join(parts)


def throughput_chart(
    points: list[tuple[dt.datetime, int, int, bool]],
    *,
    title: str,
    width: int = 720,
    height: int = 240,
) -> str:
    """Stacked columns per bucket of (start, completed, failed, filling).

    Completed at the bottom, failed on top; a still-filling bucket is drawn
    half-transparent and dashed.
    """
    if not points:
        return _empty("throughput-chart", title, width, height)
    rows = sorted(
        ((_ts(t), t, max(c, 0), max(f, 0), filling) for t, c, f, filling in points),
        key=lambda r: r[0],
    )
    starts = [r[0] for r in rows]
    steps = [b - a for a, b in itertools.pairwise(starts) if b > a]
    slot = min(steps) if steps else 0.0  # the bucket size, inferred from the spacing
    left, right, top, bottom = _LEFT, width - _RIGHT, _TOP, height - _BOTTOM
    t0, t1 = starts[0], starts[-1] + slot
    x = _x_scale(t0, t1, left, right)
    col = (x(t0 + slot) - x(t0)) * 0.8 if slot else min(40.0, (right - left) * 0.3)
    y_max = _nice_max(max(c + f for _, _, c, f, _ in rows))

    def h(v: int) -> float:
        return max(v / y_max * (bottom - top), 1.0) if v > 0 else 0.0

    parts = _open("throughput-chart", title, width, height)
    ticks = _ticks(y_max, integer=True)
    _y_axis(parts, [(bottom - v / y_max * (bottom - top), _num(v)) for v in ticks], left, right)
    _x_axis(parts, _time_ticks(t0, t1), t1 - t0, x, right, bottom)
    for ts, t, completed, failed, filling in rows:
        cx = x(ts) + ((x(ts + slot) - x(ts) - col) / 2 if slot else -col / 2)
        tip = f"{_when(t)} · completed {completed} · failed {failed}"
        extra, attrs = (" filling", _FILLING_COLUMN) if filling else ("", "")
        parts.append(f'<g class="col{extra}"><title>{_esc(tip)}</title>')
        parts.append(
            f'<rect class="hit" x="{_n(cx)}" y="{top}" width="{_n(col)}" '
            f'height="{bottom - top}" fill="#000" fill-opacity="0"/>'
        )
        base = float(bottom)
        for count, cls, fill in (
            (completed, "completed", _COMPLETED_FILL),
            (failed, "failed", _FAILED_FILL),
        ):
            if count > 0:
                base -= h(count)
                parts.append(
                    f'<rect class="{cls}{extra}" x="{_n(cx)}" y="{_n(base)}" width="{_n(col)}" '
                    f'height="{_n(h(count))}" fill="{fill}"{attrs}/>'
                )
        parts.append("</g>")
    _legend(
        parts, [("completed", "completed", False), ("failed", "failed", False)], left, height - 8
    )
    parts.append("</svg>")
    return "".join(parts)


def split_widths(completed: int, failed: int, busiest: int) -> tuple[float, float]:
    """The completed and failed segment widths, as fractions of the track (0..1).

    The bar's length is (completed + failed) / busiest. A non-zero segment is never
    narrower than 1 % so a rare failure stays visible; a zero segment is 0. When the
    minimum bumps one segment past a full track, the other one shrinks to make room."""
    completed, failed = max(completed, 0), max(failed, 0)
    total = completed + failed
    if busiest <= 0 or total == 0:
        return 0.0, 0.0
    length = min(total / busiest, 1.0)
    c_w, f_w = length * completed / total, length * failed / total
    if failed and f_w < MIN_SEGMENT:
        f_w = MIN_SEGMENT
        c_w = min(c_w, 1.0 - f_w)
    if completed and c_w < MIN_SEGMENT:
        c_w = MIN_SEGMENT
        f_w = min(f_w, 1.0 - c_w)
    return c_w, f_w


def split_bar(
    completed: int, failed: int, busiest: int, *, width: int = 240, height: int = 12
) -> str:
    """A horizontal track with a completed segment then a failed one.

    It is as long as this queue's runs relative to the busiest queue's (see
    :func:`split_widths`).
    """
    total = max(completed, 0) + max(failed, 0)
    share = 100 * max(failed, 0) / total if total else 0.0
    parts = _open(
        "split-bar",
        f"completed {completed} · failed {failed} ({share:.1f} % failed)",
        width,
        height,
    )
    parts.append(
        f'<rect class="track" x="0" y="0" width="{width}" height="{height}" '
        f'fill="currentColor" fill-opacity="0.12"/>'
    )
    c_w, f_w = split_widths(completed, failed, busiest)
    start = 0.0
    for frac, cls, fill in ((c_w, "completed", _COMPLETED_FILL), (f_w, "failed", _FAILED_FILL)):
        if frac > 0:
            parts.append(
                f'<rect class="{cls}" x="{_n(start)}" y="0" width="{_n(frac * width, 2)}" '
                f'height="{height}" fill="{fill}"/>'
            )
            start += frac * width
    parts.append("</svg>")
    return "".join(parts)


def sparkline(
    values: list[float | None], *, width: int = 120, height: int = 24, css: str = "s1"
) -> str:
    """A tiny line for a table cell.

    No axes, no labels, ``None`` values are gaps; the y range runs from min(0, lowest)
    to the highest value.
    """
    usable = [v for v in values if v is not None and math.isfinite(v)]
    if not usable:
        return "".join([*_open("sparkline", "no data", width, height), "</svg>"])
    lo, hi, pad = min(0.0, min(usable)), max(usable), 2.0
    span = hi - lo if hi > lo else 1.0
    step = (width - 2 * pad) / (len(values) - 1) if len(values) > 1 else 0.0
    coords = [
        (pad + i * step if step else width / 2, height - pad - (v - lo) / span * (height - 2 * pad))
        if v is not None and math.isfinite(v)
        else None
        for i, v in enumerate(values)
    ]
    summary = f"last {_num(usable[-1])} · min {_num(min(usable))} · max {_num(hi)}"
    parts = _open("sparkline", summary, width, height)
    runs = _runs(coords)
    if d := _path_d(runs):
        parts.append(
            f'<path class="line {_esc(css)}" d="{d}" fill="none" stroke="currentColor" '
            f'stroke-width="1.2"/>'
        )
    for px, py in (run[0] for run in runs if len(run) == 1):
        parts.append(
            f'<circle class="pt lone {_esc(css)}" cx="{_n(px)}" cy="{_n(py)}" r="1.2" '
            f'fill="currentColor"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


# -- scales ---------------------------------------------------------------------------


def _nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at least ``value``; 1 for nothing positive."""
    if not (value > 0 and math.isfinite(value)):
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    for m in (1.0, 2.0, 2.5, 5.0):
        if m * base >= value * (1 - 1e-9):
            return m * base
    return 10.0 * base


def _ticks(top: float, *, integer: bool = False) -> list[float]:
    """0 .. ``top`` (a :func:`_nice_max`) in 4 or 5 even steps; whole numbers only if asked."""
    mantissa = top / 10.0 ** math.floor(math.log10(top))
    steps = 5 if math.isclose(mantissa, 2.5) or math.isclose(mantissa, 5.0) else 4
    ticks = [top * i / steps for i in range(steps + 1)]
    return [t for t in ticks if math.isclose(t, round(t))] if integer else ticks


def _x_scale(t0: float, t1: float, left: float, right: float) -> Callable[[float], float]:
    """Epoch seconds to x; a zero-length range maps everything to the middle."""
    if t1 <= t0:
        return lambda t: (left + right) / 2
    k = (right - left) / (t1 - t0)
    return lambda t: left + (t - t0) * k


def _time_ticks(t0: float, t1: float) -> list[float]:
    """4-6 round instants in [t0, t1] (UTC-aligned steps), else 5 evenly spaced ones."""
    if t1 <= t0:
        return [t0]
    for step in _TIME_STEPS:
        first = math.ceil(t0 / step) * step
        count = math.floor((t1 - first) / step) + 1
        if count <= 6:
            if count >= 4:
                return [first + i * step for i in range(count)]
            break
    return [t0 + (t1 - t0) * i / 4 for i in range(5)]


# -- drawing helpers ------------------------------------------------------------------


def _y_axis(
    parts: list[str], ticks: Sequence[tuple[float, str]], left: float, right: float
) -> None:
    for py, label in ticks:
        parts.append(
            f'<line class="grid" x1="{left}" x2="{right}" y1="{_n(py)}" y2="{_n(py)}" '
            f'stroke="currentColor" stroke-opacity="0.15"/>'
            f'<text class="tick y-tick" x="{left - 6}" y="{_n(py + 3)}" font-size="10" '
            f'text-anchor="end">{_esc(label)}</text>'
        )


def _x_axis(
    parts: list[str],
    ticks: Sequence[float],
    span: float,
    x: Callable[[float], float],
    right: float,
    bottom: float,
) -> None:
    fmt = "%H:%M" if span <= 2 * _DAY else "%b %d"
    for t in ticks:
        px = x(t)
        anchor = "end" if px > right - 16 else "middle"
        label = dt.datetime.fromtimestamp(t, _UTC).strftime(fmt)
        parts.append(
            f'<text class="tick x-tick" x="{_n(px)}" y="{bottom + 14}" font-size="10" '
            f'text-anchor="{anchor}">{_esc(label)}</text>'
        )


def _legend(
    parts: list[str], items: Sequence[tuple[str, str, bool]], left: float, y: float
) -> None:
    """A row of swatch + name entries, each with data-series for the toggle script.

    A dashed series' swatch is a short dashed stroke rather than a square."""
    at = float(left)
    for name, css, hidden in items:
        cls = _esc(css) + (" off" if hidden else "")
        if "dashed" in css.split():
            swatch = (
                f'<line class="swatch-line {_esc(css)}" x1="{_n(at - 2)}" x2="{_n(at + 12)}" '
                f'y1="{_n(y - 4)}" y2="{_n(y - 4)}" stroke="currentColor" stroke-width="2" '
                f'stroke-dasharray="4 2"/>'
            )
        else:
            swatch = (
                f'<rect class="swatch {_esc(css)}" x="{_n(at)}" y="{_n(y - 9)}" width="10" '
                f'height="10" fill="currentColor"/>'
            )
        parts.append(
            f'<g class="legend-item {cls}" data-series="{_esc(name)}">{swatch}'
            f'<text x="{_n(at + 14)}" y="{_n(y)}" font-size="11">{_esc(name)}</text></g>'
        )
        at += 14 + 6.5 * len(name) + 16


def _runs(coords: Sequence[Point | None]) -> list[list[Point]]:
    """Consecutive non-gap points, split at each ``None``."""
    runs: list[list[Point]] = [[]]
    for p in coords:
        if p is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(p)
    return [run for run in runs if run]


def _path_d(runs: Sequence[Sequence[Point]]) -> str:
    """``M x,y L x,y ...`` per run of two or more points (a lone point draws no line)."""
    return " ".join(
        " ".join(("M" if i == 0 else "L") + f"{_n(px)},{_n(py)}" for i, (px, py) in enumerate(run))
        for run in runs
        if len(run) >= 2
    )


def _open(kind: str, title: str, width: int, height: int) -> list[str]:
    label = _esc(title)
    return [
        f'<svg xmlns="{_NS}" viewBox="0 0 {width} {height}" class="chart {kind}" role="img" '
        f'aria-label="{label}">',
        f"<title>{label}</title>",
    ]


def _empty(kind: str, title: str, width: int, height: int) -> str:
    return "".join(
        [
            *_open(kind, title, width, height),
            f'<text class="empty" x="{_n(width / 2)}" y="{_n(height / 2)}" font-size="12" '
            f'text-anchor="middle" dominant-baseline="middle">{EMPTY_TEXT}</text></svg>',
        ]
    )


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _n(x: float, places: int = 1) -> str:
    """A coordinate with at most ``places`` decimals ("12", "12.5")."""
    return f"{x:.{places}f}".rstrip("0").rstrip(".")


def _num(x: float) -> str:
    """A value for a label: 3 significant-ish digits, k/M for large ones ("0.25", "12.5", "25k")."""
    a = abs(x)
    if a >= 1e6:
        return _num(x / 1e6) + "M"
    if a >= 1e4:
        return _num(x / 1e3) + "k"
    if a == 0:
        return "0"
    s = f"{x:.0f}" if a >= 100 else f"{x:.1f}" if a >= 10 else f"{x:.2f}" if a >= 1 else f"{x:.2g}"
    return s.rstrip("0").rstrip(".") if "." in s and "e" not in s else s


def _ts(t: dt.datetime) -> float:
    """Epoch seconds; a naive datetime is taken as UTC."""
    return (t.replace(tzinfo=_UTC) if t.tzinfo is None else t).timestamp()


def _when(t: dt.datetime) -> str:
    """A tooltip time, in UTC."""
    return dt.datetime.fromtimestamp(_ts(t), _UTC).strftime("%Y-%m-%d %H:%M UTC")
