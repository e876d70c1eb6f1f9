"""``python -m bench.fleet`` runs end to end on a small fleet and reports every figure.

No timing is asserted (speed is the bench's business): the report has its shape, every
figure is a number in its range, the fleet reads as it was built (counts, pages,
pauses, removals), and the schema is gone afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.fleet import server_key, table

pytestmark = [pytest.mark.feature("bench"), pytest.mark.postgres]

ROOT = Path(__file__).resolve().parent.parent
SERVERS, DEAD, QUEUES, SENDERS, REMOVED, BEATS, CLAIMS = 24, 30, 4, 2, 2, 2, 10


@pytest.fixture(scope="module")
def report(pg_dsn: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.fleet", "--dsn", pg_dsn, "--json"),
            *("--servers", str(SERVERS), "--dead", str(DEAD), "--queues", str(QUEUES)),
            *("--senders", str(SENDERS), "--removed", str(REMOVED), "--beats", str(BEATS)),
            *("--claims", str(CLAIMS), "--loads", "2", "--workers", "2"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_the_fleet_reads_as_built(report: dict[str, Any]) -> None:
    fleet, ops = report["fleet"], report["operations"]
    keyed_live = SERVERS - REMOVED
    assert fleet["keyed_live"] == keyed_live
    assert ops["removed"] == REMOVED
    # a removed server's rows: its own and its earlier lives among the dead rows
    assert ops["rows_removed"] >= REMOVED
    assert ops["paused"] == 1 and ops["paused_learned_at_next_beat"] == 1  # server 2
    assert fleet["counts"] == {
        "total": SERVERS + SENDERS + DEAD - ops["rows_removed"],
        "live": keyed_live + SENDERS,
        "keyed": fleet["counts"]["keyed"],
        "keyed_live": keyed_live,
        "anonymous_live": SENDERS,
        "paused": 1,
    }
    assert keyed_live < fleet["counts"]["keyed"] < fleet["counts"]["total"]
    assert fleet["registry_rows"] == fleet["counts"]["total"]


def test_the_reads_and_pages_are_timed_and_counted(report: dict[str, Any]) -> None:
    reads, pages = report["reads"], report["pages"]
    for name in ("list_instances_first_50", "instance_counts", "get_instances_1000"):
        assert _positive(reads[name]["ms"]) and _positive(reads[name]["round_trips"]), name
    live = SERVERS - REMOVED + SENDERS
    first = reads["list_instances_first_50"]
    assert first["rows"] == min(50, report["fleet"]["registry_rows"])
    assert first["live_rows"] == live and first["live_first"] is True
    every = reads["get_instances_1000"]
    assert every["rows"] == report["fleet"]["registry_rows"] and every["live_rows"] == live
    for path in ("/", "/instances"):
        page = pages[path]
        assert _positive(page["ms"]) and _positive(page["round_trips"]), path
        assert _positive(page["bytes"]), path
    assert pages["/instances"]["live_keyed_shown"] == pages["/instances"]["live_keyed"]
    # the overview counts every live keyed server (from one aggregate, not a page)
    assert pages["/"]["live_shown"] == pages["/"]["live"] == pages["/instances"]["live_keyed"]


def test_the_heartbeat_write_load_is_measured(report: dict[str, Any]) -> None:
    beat = report["heartbeat"]
    assert beat["beats"] == BEATS * (SERVERS - 1 - REMOVED)  # the simulated live servers
    assert _positive(beat["ms"]) and _positive(beat["instance_row_bytes"])
    assert beat["statements_per_beat"] == 2  # the row's upsert and the key's beat
    assert beat["round_trips_per_beat"] >= beat["statements_per_beat"]
    for name, written in beat["rows_per_beat"].items():
        assert set(written) == {"inserted", "updated", "hot_updated", "deleted"}, name
        # one row of each table per beat, once the server has flushed its counters
        assert 0 < written["inserted"] + written["updated"] <= 1, (name, written)
        assert 0 <= written["hot_updated"] <= written["updated"], (name, written)
        assert written["deleted"] == 0, (name, written)
    assert _positive(beat["fleet_statements_per_second"])


def test_claims_metrics_and_operations_have_figures(report: dict[str, Any]) -> None:
    claim = report["claim_us"]
    assert claim["claims"] == CLAIMS
    assert _positive(claim["plain"]) and _positive(claim["affinity"])
    tick = report["metrics_tick"]
    assert tick["queues"] == QUEUES and _positive(tick["ms"]) and _positive(tick["round_trips"])
    ops = report["operations"]
    assert _positive(report["registration_ms"])
    assert _positive(ops["pause_ms"]) and _positive(ops["remove_ms"])
    assert _positive(report["registration_round_trips"])
    assert _positive(ops["pause_round_trips"]) and _positive(ops["remove_round_trips"])


def test_the_table_shows_every_figure(report: dict[str, Any]) -> None:
    text = table(report)
    for label in ("overview page", "instances page", "list_instances", "instance_counts",
                  "heartbeat", "remove_instance", "metrics tick", "with affinity"):  # fmt: skip
        assert label in text, label
    assert text.count("\n| ") >= 10  # a row per figure


def test_the_schema_is_dropped(report: dict[str, Any], pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", [report["schema"]]
        ).fetchone()
    assert row == (0,)


def test_server_keys_name_an_address_and_a_class() -> None:
    assert [server_key(n) for n in (0, 1, 4, 250)] == [
        "10.0.0.1:gpu",
        "10.0.0.2:cpu",
        "10.0.0.5:gpu",
        "10.0.1.1:cpu",
    ]
