"""How the dashboard's pages look.

The Jinja2 environment with its filters, and the SVG charts of a queue's depth and of
the metrics history (drawn by :mod:`qcore.web.charts`).
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from qcore.metrics import LatencyPoint, WindowHistory
from qcore.web import charts

__all__ = ["depth_chart", "environment", "history_charts", "link"]

HERE = Path(__file__).parent


def _when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if value else "–"


def _age(value: dt.datetime | None) -> str:
    if value is None:
        return "–"
    seconds = (dt.datetime.now(dt.timezone.utc) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _counted(age: float | None) -> str:
    """How old counts are, from their age in seconds: ``as of 41 s ago``."""
    if age is None:
        return "not counted yet"
    seconds = max(age, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"as of {seconds / size:.0f} {unit} ago"
    return f"as of {seconds:.0f} s ago"


def _pretty(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["age"] = _age
    env.filters["counted"] = _counted
    env.filters["pretty"] = _pretty
    env.filters["ms"] = lambda v: charts.format_duration_ms(v) if v is not None else "–"
    env.filters["seconds"] = lambda v: charts.format_duration_ms(v * 1000) if v is not None else "–"
    env.filters["bytes"] = _bytes
    env.globals["split_bar"] = lambda c, f, top: Markup(charts.split_bar(c, f, top))
    env.globals["sparkline"] = lambda values: Markup(charts.sparkline(values))
    env.globals["link"] = link
    return env


def link(path: str, **params: Any) -> str:
    """``path`` with ``params`` (None left out) as its query, each value encoded."""
    given = {k: str(v) for k, v in params.items() if v is not None}
    return f"{path}?{urllib.parse.urlencode(given)}" if given else path


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def depth_chart(depth: list[dict[str, Any]]) -> str:
    def series(name: str, column: str, css: str) -> charts.Series:
        return charts.Series(
            name, [(row["captured_on"], float(row.get(column) or 0)) for row in depth], css=css
        )

    return charts.line_chart(
        [
            series("queued", "queued_count", "s1"),
            series("active", "active_count", "s2"),
            series("failed", "failed_count", "failed"),
        ],
        title="depth",
    )


def history_charts(history: WindowHistory, label: str) -> dict[str, Markup]:
    points = history.throughput
    latency = history.latency
    filling = bool(latency) and latency[-1].filling

    def line(
        name: str,
        pick: Callable[[LatencyPoint], float | None],
        css: str,
        hidden: bool = False,
        dashed: bool = False,
    ) -> charts.Series:
        return charts.Series(
            name,
            [(p.start, pick(p)) for p in latency],
            css=css,
            hidden=hidden,
            filling=filling,
            dashed=dashed,
        )

    return {
        "throughput": Markup(
            charts.throughput_chart(
                [(p.start, p.completed, p.failed, p.filling) for p in points],
                title=f"throughput, {label}",
            )
        ),
        "latency": Markup(
            charts.line_chart(
                # run in blues, wait in oranges, each percentile its own shade; the
                # queue-age gauge shares the wait's duration axis, dashed
                [
                    line("p95 run", lambda p: p.run.p95, "s1"),
                    line("p95 wait", lambda p: p.wait.p95, "s2"),
                    line(
                        "queue age",
                        lambda p: p.age * 1000 if p.age is not None else None,
                        "s3",
                        dashed=True,
                    ),
                    line("p50 run", lambda p: p.run.p50, "s4", hidden=True),
                    line("p99 run", lambda p: p.run.p99, "s5", hidden=True),
                    line("p50 wait", lambda p: p.wait.p50, "s6", hidden=True),
                    line("p99 wait", lambda p: p.wait.p99, "s7", hidden=True),
                ],
                title=f"latency, {label}",
                unit="ms",
                log_scale=True,
            )
        ),
    }
