"""The dashboard's inline SVG charts (qcore.web.charts): well-formed, escaped, free of
inline styles and scripts (the board's CSP), and the geometry rules (no database)."""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

import pytest

from qcore.metrics import LatencyPoint, Percentiles, QueueTotals, ThroughputPoint, WindowHistory
from qcore.web.charts import (
    EMPTY_TEXT,
    Series,
    _nice_max,
    _ticks,
    _time_ticks,
    format_duration_ms,
    line_chart,
    sparkline,
    split_bar,
    split_widths,
    throughput_chart,
)
from qcore.web.render import environment, history_charts

SVG = "{http://www.w3.org/2000/svg}"
T0 = dt.datetime(2024, 12, 5, 10, 0, tzinfo=dt.timezone.utc)
EVIL_NAME = "<script>alert(1)</script>"
EVIL_TITLE = '"><img onerror=alert(1)>'
Points = list[tuple[dt.datetime, float | None]]


def minutes(*values: float | None, step: int = 5) -> Points:
    return [(T0 + dt.timedelta(minutes=step * i), v) for i, v in enumerate(values)]


def parse(svg: str) -> ET.Element:
    """Parse, and check the rules every chart obeys: the root, its title, no styles or scripts."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert root.get("role") == "img"
    assert root.get("aria-label") is not None
    assert "chart" in (root.get("class") or "").split()
    assert root.get("width") is None and root.get("height") is None
    assert re.fullmatch(r"0 0 \d+ \d+", root.get("viewBox") or "")
    assert root[0].tag == f"{SVG}title"
    for el in root.iter():
        assert "style" not in el.attrib, el.attrib
        assert el.tag not in (f"{SVG}style", f"{SVG}script", "style", "script")
        assert not any(name.lower().startswith("on") for name in el.attrib)
    assert "style=" not in svg and "<style" not in svg and "<script" not in svg
    return root


def find(root: ET.Element, tag: str, cls: str | None = None) -> list[ET.Element]:
    found = root.iter(f"{SVG}{tag}")
    return [el for el in found if cls is None or cls in (el.get("class") or "").split()]


def bars(root: ET.Element, cls: str) -> list[ET.Element]:
    """The throughput column rects of one class (not the legend's swatches)."""
    return [r for g in find(root, "g", "col") for r in find(g, "rect", cls)]


def texts(root: ET.Element, cls: str) -> list[str]:
    return [el.text or "" for el in find(root, "text", cls)]


def all_charts(name: str, title: str) -> list[str]:
    series = [Series(name, minutes(1, 2, None, 4, 5), filling=True)]
    return [
        line_chart(series, title=title, unit="ms"),
        line_chart(series, title=title, unit=name, log_scale=True),
        line_chart([], title=title),
        throughput_chart(
            [(T0, 3, 1, False), (T0 + dt.timedelta(hours=1), 2, 0, True)], title=title
        ),
        throughput_chart([], title=title),
        split_bar(10, 1, 20),
        sparkline([1.0, None, 2.0, 3.0], css=name),
        sparkline([]),
    ]


@pytest.mark.parametrize("index", range(8))
def test_every_chart_is_well_formed_escaped_and_style_free(index: int) -> None:
    svg = all_charts(EVIL_NAME, EVIL_TITLE)[index]
    root = parse(svg)
    assert "<img" not in svg
    assert not find(root, "img") and not list(root.iter("img"))
    if index < 5:  # the charts that carry the caller's title
        assert root.get("aria-label") == EVIL_TITLE
        assert root[0].text == EVIL_TITLE
        assert "&quot;&gt;&lt;img onerror=alert(1)&gt;" in svg


def test_series_name_is_escaped_in_legend_paths_and_tooltips() -> None:
    svg = line_chart([Series(EVIL_NAME, minutes(1, 2, 3))], title="t")
    root = parse(svg)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    legend = find(root, "g", "legend-item")
    assert [g.get("data-series") for g in legend] == [EVIL_NAME]
    assert [p.get("data-series") for p in find(root, "path", "line")] == [EVIL_NAME]
    tips = [t.text or "" for c in find(root, "circle", "pt") for t in c.iter(f"{SVG}title")]
    assert len(tips) == 3
    assert tips[0] == f"{EVIL_NAME} · 2024-12-05 10:00 UTC · 1"


def test_format_duration_ms() -> None:
    assert format_duration_ms(0.5) == "0.5 ms"
    assert format_duration_ms(12) == "12 ms"
    assert format_duration_ms(100) == "100 ms"
    assert format_duration_ms(1000) == "1 s"
    assert format_duration_ms(1500) == "1.5 s"
    assert format_duration_ms(10_000) == "10 s"
    assert format_duration_ms(60_000) == "1 min"
    assert format_duration_ms(90_000) == "1.5 min"
    assert format_duration_ms(2 * 3_600_000) == "2 h"


def test_nice_max_and_ticks() -> None:
    assert _nice_max(0) == 1.0
    assert _nice_max(0.3) == pytest.approx(0.5)
    assert _nice_max(7) == 10
    assert _nice_max(17) == 20
    assert _nice_max(21) == 25
    assert _nice_max(250) == 250
    assert _nice_max(251) == 500
    assert _ticks(20) == [0, 5, 10, 15, 20]
    assert _ticks(2.5) == pytest.approx([0, 0.5, 1, 1.5, 2, 2.5])
    assert _ticks(1, integer=True) == [0, 1]
    for top in (1, 2, 2.5, 5, 10, 250):
        assert 5 <= len(_ticks(top)) <= 6


def test_time_ticks_are_four_to_six_round_instants() -> None:
    t0 = T0.timestamp()
    for span in (600, 3600, 6 * 3600, 86_400, 7 * 86_400, 30 * 86_400):
        ticks = _time_ticks(t0 + 17, t0 + 17 + span)
        assert 4 <= len(ticks) <= 6, span
        assert all(t0 + 17 <= t <= t0 + 17 + span for t in ticks)


def test_linear_chart_axes_and_labels() -> None:
    root = parse(line_chart([Series("p95 run", minutes(120, 340, 80))], title="Latency", unit="ms"))
    assert texts(root, "y-tick") == ["0 ms", "100 ms", "200 ms", "300 ms", "400 ms", "500 ms"]
    assert texts(root, "x-tick") == ["10:00", "10:02", "10:04", "10:06", "10:08", "10:10"]
    assert texts(root, "axis-title") == ["ms"]
    assert not find(root, "text", "empty")


def test_x_labels_switch_to_dates_over_two_days() -> None:
    midnight = T0.replace(hour=0)
    points: Points = [(midnight + dt.timedelta(days=d), 1.0) for d in range(10)]
    root = parse(line_chart([Series("a", points)], title="t"))
    assert texts(root, "x-tick") == ["Dec 05", "Dec 07", "Dec 09", "Dec 11", "Dec 13"]
    hours: Points = [(midnight + dt.timedelta(hours=h), 1.0) for h in range(48)]  # 47 h: times
    labels = texts(parse(line_chart([Series("a", hours)], title="t")), "x-tick")
    assert 4 <= len(labels) <= 6
    assert all(re.fullmatch(r"\d\d:\d\d", label) for label in labels)


def test_log_axis_is_labelled_and_ticks_at_powers_of_ten() -> None:
    series = [Series("p99", minutes(1.5, 40, 0, None, 9000, -3))]
    root = parse(line_chart(series, title="Latency", unit="ms", log_scale=True))
    assert texts(root, "axis-title") == ["ms, log scale"]
    assert texts(root, "y-tick") == ["1 ms", "10 ms", "100 ms", "1 s", "10 s"]
    # 0 and negative values are gaps on a log axis: only three points are drawn
    assert len(find(root, "circle", "pt")) == 3
    d = find(root, "path", "line")[0].get("d") or ""
    assert d.count("M") == 1 and d.count("L") == 1


def test_log_axis_without_unit_still_says_log_scale() -> None:
    root = parse(line_chart([Series("x", minutes(3, 30))], title="t", log_scale=True))
    assert texts(root, "axis-title") == ["log scale"]
    assert texts(root, "y-tick") == ["1", "10", "100"]


def test_log_axis_with_nothing_positive_is_empty() -> None:
    root = parse(line_chart([Series("x", minutes(0, -1))], title="t", log_scale=True))
    assert texts(root, "empty") == [EMPTY_TEXT]


def test_none_splits_the_path_into_runs() -> None:
    root = parse(line_chart([Series("a", minutes(1, 2, None, 3, 4))], title="t"))
    (path,) = find(root, "path", "line")
    d = path.get("d") or ""
    assert d.count("M") == 2 and d.count("L") == 2
    assert len(find(root, "circle", "pt")) == 4


def test_a_lone_point_is_a_visible_circle_not_a_line() -> None:
    root = parse(line_chart([Series("a", minutes(1, None, 3, None, 4, 5))], title="t"))
    lone = find(root, "circle", "lone")
    assert len(lone) == 2
    assert all(c.get("fill-opacity") == "1" for c in lone)
    assert (find(root, "path", "line")[0].get("d") or "").count("M") == 1


def test_filling_segment_is_a_separate_dashed_path() -> None:
    root = parse(line_chart([Series("a", minutes(1, 2, 3, 4), css="s2", filling=True)], title="t"))
    paths = find(root, "path", "line")
    assert len(paths) == 2
    main, tail = paths
    assert "filling" not in (main.get("class") or "").split()
    assert (main.get("d") or "").count("L") == 2  # points 1..3
    assert main.get("stroke-dasharray") is None
    assert (tail.get("class") or "").split() == ["line", "s2", "filling"]
    assert tail.get("stroke-dasharray") == "4 3"
    assert (tail.get("d") or "").count("M") == 1 and (tail.get("d") or "").count("L") == 1
    assert tail.get("data-series") == "a"
    assert len(find(root, "circle", "filling")) == 1


def test_filling_without_a_previous_point_draws_no_dashed_path() -> None:
    root = parse(line_chart([Series("a", minutes(1, 2, None, 4), filling=True)], title="t"))
    assert not find(root, "path", "filling")


def test_hidden_series_is_drawn_with_class_off() -> None:
    series = [Series("p50", minutes(1, 2), css="s1", hidden=True), Series("p95", minutes(3, 4))]
    root = parse(line_chart(series, title="t"))
    paths = find(root, "path", "line")
    assert ["off" in (p.get("class") or "").split() for p in paths] == [True, False]
    legend = find(root, "g", "legend-item")
    assert [g.get("data-series") for g in legend] == ["p50", "p95"]
    assert "off" in (legend[0].get("class") or "").split()
    assert [r.get("class") for r in find(root, "rect", "swatch")] == ["swatch s1", "swatch s1"]


@pytest.mark.parametrize(
    "series",
    [[], [Series("a", [])], [Series("a", minutes(None, None))]],
    ids=["none", "no points", "all gaps"],
)
def test_empty_line_chart(series: list[Series]) -> None:
    root = parse(line_chart(series, title="Latency"))
    assert root[0].text == "Latency"
    (empty,) = find(root, "text", "empty")
    assert empty.text == EMPTY_TEXT
    assert empty.get("text-anchor") == "middle"
    assert not find(root, "path")


def test_throughput_columns_stack_failed_on_completed() -> None:
    hour = dt.timedelta(hours=1)
    points = [(T0, 30, 10, False), (T0 + hour, 0, 0, False), (T0 + 2 * hour, 5, 0, True)]
    root = parse(throughput_chart(points, title="Throughput"))
    completed, failed = bars(root, "completed"), bars(root, "failed")
    assert len(completed) == 2 and len(failed) == 1  # zero segments are not drawn
    c0, f0 = completed[0], failed[0]
    c_top, f_top = float(c0.get("y") or 0), float(f0.get("y") or 0)
    assert f_top + float(f0.get("height") or 0) == pytest.approx(c_top, abs=0.11)
    assert float(c0.get("height") or 0) == pytest.approx(3 * float(f0.get("height") or 0), rel=0.02)
    assert texts(root, "y-tick") == ["0", "10", "20", "30", "40", "50"]
    tips = [g[0].text for g in find(root, "g", "col")]
    assert tips[0] == "2024-12-05 10:00 UTC · completed 30 · failed 10"
    assert tips[1] == "2024-12-05 11:00 UTC · completed 0 · failed 0"
    legend = [g.get("data-series") for g in find(root, "g", "legend-item")]
    assert legend == ["completed", "failed"]


def test_throughput_filling_bucket_is_dashed_and_translucent() -> None:
    points = [(T0, 4, 1, False), (T0 + dt.timedelta(minutes=5), 2, 1, True)]
    root = parse(throughput_chart(points, title="t"))
    filling = bars(root, "filling")
    assert {r.get("class") for r in filling} == {"completed filling", "failed filling"}
    assert all(r.get("stroke-dasharray") == "3 2" for r in filling)
    assert all(r.get("fill-opacity") == "0.5" for r in filling)
    settled = [r for r in bars(root, "completed") if r not in filling]
    assert len(settled) == 1 and settled[0].get("stroke-dasharray") is None


def test_throughput_all_zero_and_single_bucket() -> None:
    root = parse(throughput_chart([(T0, 0, 0, True)], title="t"))
    assert texts(root, "y-tick") == ["0", "1"]
    assert texts(root, "x-tick") == ["10:00"]
    assert not bars(root, "completed") and not bars(root, "failed")
    assert len(bars(root, "hit")) == 1  # the column still has its tooltip area
    assert texts(parse(throughput_chart([], title="t")), "empty") == [EMPTY_TEXT]


def test_split_widths_minimum_rule() -> None:
    c, f = split_widths(999, 1, 1000)
    assert f >= 0.01
    assert c + f <= 1.0 + 1e-9
    assert c > 0.9
    assert split_widths(500, 0, 1000) == pytest.approx((0.5, 0.0))
    assert split_widths(0, 0, 1000) == (0.0, 0.0)
    assert split_widths(10, 5, 0) == (0.0, 0.0)
    assert sum(split_widths(10, 0, 1000)) >= 0.01
    assert sum(split_widths(9, 1, 1000)) >= 0.01
    c, f = split_widths(1, 999, 1000)
    assert c >= 0.01 and c + f <= 1.0 + 1e-9
    c, f = split_widths(1, 1, 100_000)
    assert c == pytest.approx(0.01) and f == pytest.approx(0.01)
    assert split_widths(300, 100, 800) == pytest.approx((0.375, 0.125))
    assert sum(split_widths(5000, 10, 1000)) <= 1.0 + 1e-9  # busiest understated: capped


def test_split_bar() -> None:
    svg = split_bar(999, 1, 1000, width=200)
    root = parse(svg)
    assert root[0].text == "completed 999 · failed 1 (0.1 % failed)"
    (track,) = find(root, "rect", "track")
    assert track.get("width") == "200"
    (completed,) = find(root, "rect", "completed")
    (failed,) = find(root, "rect", "failed")
    assert float(failed.get("width") or 0) >= 2.0  # 1 % of 200
    assert float(failed.get("x") or 0) == pytest.approx(float(completed.get("width") or 0))
    only_track = parse(split_bar(3, 0, 0))
    assert len(find(only_track, "rect")) == 1
    no_failures = parse(split_bar(3, 0, 10))
    assert not find(no_failures, "rect", "failed")
    assert no_failures[0].text == "completed 3 · failed 0 (0.0 % failed)"


def test_sparkline() -> None:
    root = parse(sparkline([1.0, 2.0, None, 4.0, 3.0], css="s3"))
    (path,) = find(root, "path")
    assert path.get("class") == "line s3"
    assert (path.get("d") or "").count("M") == 2
    assert not find(root, "text")
    empty = parse(sparkline([None, None]))
    assert empty[0].text == "no data"
    assert len(list(empty)) == 1
    assert parse(sparkline([]))[0].text == "no data"
    lone = parse(sparkline([5.0]))
    assert not find(lone, "path") and len(find(lone, "circle", "lone")) == 1


def test_naive_datetimes_are_taken_as_utc() -> None:
    naive: Points = [
        (T0.replace(tzinfo=None) + dt.timedelta(minutes=5 * i), float(i)) for i in range(3)
    ]
    aware = minutes(0, 1, 2)
    assert line_chart([Series("a", naive)], title="t") == line_chart(
        [Series("a", aware)], title="t"
    )


def test_a_log_axis_of_durations_is_labelled_in_round_durations() -> None:
    """Waits from half a second to two hours: the labels are round ("1 min", "1 h"),
    never a power of ten of milliseconds spelled in minutes ("1.67 min")."""
    series = [Series("p95 wait", minutes(500, 90_000, 7_200_000))]
    root = parse(line_chart(series, title="Latency", unit="ms", log_scale=True))
    labels = texts(root, "y-tick")
    assert labels == ["100 ms", "1 s", "10 s", "1 min", "10 min", "1 h"]
    assert not any("." in label for label in labels)


# -- the chart area of the queue and history pages (qcore.web.render + its template) ----


def percentiles(p50: float | None, p95: float | None, p99: float | None) -> Percentiles:
    return Percentiles(p50=p50, p95=p95, p99=p99, samples=1 if p95 is not None else 0)


def a_window() -> WindowHistory:
    """Three 5-minute buckets, the newest still filling, and the range's totals."""
    starts = [T0 + dt.timedelta(minutes=5 * i) for i in range(3)]
    return WindowHistory(
        throughput=[
            ThroughputPoint(starts[0], 40, 2, False),
            ThroughputPoint(starts[1], 50, 1, False),
            ThroughputPoint(starts[2], 7, 0, True),
        ],
        latency=[
            LatencyPoint(
                starts[i], percentiles(5 + i, 50, 900), percentiles(20, 200, 2000), 30.0 + i, i == 2
            )
            for i in range(3)
        ],
        totals=QueueTotals(
            "mail", 97, 3, wait=percentiles(6, 1500, 9000), run=percentiles(20, 250, 2500)
        ),
    )


def chart_area(chart: str) -> str:
    history = a_window()
    return (
        environment()
        .get_template("_history_chart.html")
        .render(
            root="/board",
            history=history,
            charts=history_charts(history, "<b>mail</b>"),
            chart=chart,
            chart_links={t: f"/queue?name=%3Cb%3E&chart={t}" for t in ("throughput", "latency")},
        )
    )


@pytest.mark.parametrize("chart", ["throughput", "latency"])
def test_one_chart_at_a_time_behind_tabs_with_the_totals_that_follow(chart: str) -> None:
    page = chart_area(chart)
    panels = re.findall(r'data-panel="(\w+)"\s*(hidden)?', page)
    assert [name for name, hidden in panels if not hidden] == [chart, chart]  # totals, figure
    assert sorted(name for name, hidden in panels if hidden) == 2 * [
        "latency" if chart == "throughput" else "throughput"
    ]
    here = re.findall(r'<a href="([^"]+)" role="tab" data-tab="(\w+)" aria-selected="true"', page)
    assert here == [(f"/board/queue?name=%3Cb%3E&amp;chart={chart}", chart)]
    # the totals computed from the range: counts on Throughput, p95s on Latency
    totals = dict(re.findall(r'data-total="([\w-]+)">([^<]*)<', page))
    assert totals == {"completed": "97", "failed": "3", "p95-run": "250 ms", "p95-wait": "1.5 s"}
    throughput, latency = page.split('data-panel="latency"', 1)
    assert 'data-total="completed"' in throughput and 'data-total="p95-run"' in latency
    assert "<b>mail</b>" not in page and "&lt;b&gt;mail&lt;/b&gt;" in page  # escaped
    assert "<details" in page and "<summary>" in page


def test_a_dashed_series_is_dashed_throughout_with_a_dashed_swatch() -> None:
    series = [Series("age", minutes(1, 2, 3), css="s3", dashed=True), Series("p95", minutes(2, 3))]
    root = parse(line_chart(series, title="t", unit="ms", log_scale=True))
    age, p95 = find(root, "path", "line")
    assert (age.get("class") or "").split() == ["line", "s3", "dashed"]
    assert age.get("stroke-dasharray") == "6 4" and p95.get("stroke-dasharray") is None
    assert [ln.get("class") for ln in find(root, "line", "swatch-line")] == [
        "swatch-line s3 dashed"
    ]
    assert len(find(root, "rect", "swatch")) == 1  # p95's square


def test_the_latency_chart_draws_percentiles_in_distinct_colours_and_the_gauge_dashed() -> None:
    root = parse(history_charts(a_window(), "mail")["latency"])
    assert "log scale" in texts(root, "axis-title")[0]
    legend = {
        g.get("data-series"): (g.get("class") or "").split() for g in find(root, "g", "legend-item")
    }
    assert list(legend) == [
        "p95 run", "p95 wait", "queue age", "p50 run", "p99 run", "p50 wait", "p99 wait",
    ]  # fmt: skip
    colours = {
        name: next(c for c in cls if re.fullmatch(r"s\d", c)) for name, cls in legend.items()
    }
    assert len(set(colours.values())) == 7, colours  # every line its own colour
    # drawn by default: p95 run, p95 wait, queue age; p50 and p99 a legend click away
    hidden = {name for name, cls in legend.items() if "off" in cls}
    assert hidden == {"p50 run", "p99 run", "p50 wait", "p99 wait"}
    paths = find(root, "path", "line")
    solid = [p for p in paths if "filling" not in (p.get("class") or "").split()]
    age = [p for p in solid if p.get("data-series") == "queue age"]
    assert len(age) == 1 and age[0].get("stroke-dasharray") == "6 4"  # the gauge, dashed
    assert all(p.get("stroke-dasharray") is None for p in solid if p not in age)
    # the newest bucket is still filling: every line's last segment is its own dashed path
    tails = find(root, "path", "filling")
    assert sorted(p.get("data-series") or "" for p in tails) == sorted(str(name) for name in legend)
    assert all(p.get("stroke-dasharray") == "4 3" for p in tails)


def test_the_throughput_chart_dashes_the_filling_bucket_of_a_window() -> None:
    root = parse(history_charts(a_window(), "mail")["throughput"])
    filling = [g for g in find(root, "g", "col") if "filling" in (g.get("class") or "").split()]
    assert len(filling) == 1
    assert all(r.get("stroke-dasharray") == "3 2" for r in find(filling[0], "rect", "completed"))
