"""The benchmark runs end to end with tiny sizes and writes every figure and ratio.

No timing is asserted: speed is the benchmark's business (``python -m bench run``),
not the test suite's. This only proves the bench works — every scenario runs on
both profiles, each side's results pass the bench's own checks (same rows on both
sides of an enqueue, every job completed exactly once in a drain), and the JSON
holds a value wherever the table shows one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qcore.conformance.suite.test_metrics import REDIS_URL

pytestmark = [pytest.mark.feature("bench"), pytest.mark.postgres]

ROOT = Path(__file__).resolve().parent.parent
THROUGHPUT = (
    "bulk_enqueue",
    "single_enqueue",
    "batch_drain",
    "worker_drain",
    "worker_drain_batched",
)
DRAINS = ("batch_drain", "worker_drain", "worker_drain_batched")


def _stat_ok(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(isinstance(value.get(k), (int, float)) for k in ("median", "min", "max"))
        and value["min"] <= value["median"] <= value["max"]
        and len(value["runs"]) == 1
    )


def _bench(module: str, *args: str) -> str:
    """What ``python -m module args`` printed, from the project's root; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def summary(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    stdout = _bench(
        *("bench", "run", "--dsn", pg_dsn, "--jobs", "50", "--repeat", "1"),
        *("--scenarios", "all", "--idle-seconds", "4", "--latency-samples", "5"),
        *("--out", str(out)),
    )
    assert "| scenario | qcore | raw baseline" in stdout
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_meta_describes_the_run(summary: dict[str, Any]) -> None:
    meta = summary["meta"]
    assert meta["profiles"] == ["postgres", "cockroachdb"]
    assert meta["jobs"] == 50 and meta["repeat"] == 1
    assert meta["cpu_count"] >= 1
    assert meta["server"]["server_version"]
    assert "password" not in meta["server"]["dsn"]


@pytest.mark.parametrize("profile", ["postgres", "cockroachdb"])
def test_every_figure_and_ratio_is_there(summary: dict[str, Any], profile: str) -> None:
    figures = summary["profiles"][profile]
    for name in (*THROUGHPUT, "wakeup_latency", "idle"):
        entry = figures[name]
        assert entry["status"] in ("ok", "n/a"), (name, entry)  # every scenario measured
        if entry["status"] == "n/a":  # no LISTEN/NOTIFY in the cockroachdb profile
            assert name == "wakeup_latency" and profile == "cockroachdb", (name, entry)
            continue
        if name in THROUGHPUT:
            assert _stat_ok(entry["qcore"]) and _stat_ok(entry["raw"]), name
            assert isinstance(entry["ratio"], float) and entry["ratio"] > 0, name
            assert _stat_ok(entry["ratio_runs"]), name
            assert entry["problems"] == [], name
            informational = {"bulk_enqueue": "raw_fk", "single_enqueue": "raw_fk"}
            if profile == "postgres":  # the lock-holding claim needs SKIP LOCKED
                informational["worker_drain"] = "raw_tx"
            if name in informational:
                other = entry["other_baselines"][informational[name]]
                assert _stat_ok(other["rate"]) and isinstance(other["ratio"], float), name
        elif name == "wakeup_latency":
            for key in ("p50_ms", "p99_ms", "max_ms"):
                assert _stat_ok(entry[key]), key
            assert entry["samples_per_run"] == 5
        else:
            assert entry["workers"] == 10
            for key in ("queries_per_second", "queries_per_worker_per_interval", "cpu_percent"):
                assert _stat_ok(entry[key]), key
    memory = figures["memory"]
    for name in DRAINS:
        if figures[name]["status"] == "ok":
            assert _stat_ok(memory["qcore"][name]), name
            assert _stat_ok(memory["raw_client"][name]), name


def test_the_profiles_are_compared(summary: dict[str, Any]) -> None:
    rows = summary["comparison"]["cockroachdb/postgres"]
    for name in THROUGHPUT:
        both = all(
            summary["profiles"][p][name]["status"] == "ok" for p in ("postgres", "cockroachdb")
        )
        if both:
            assert isinstance(rows[name]["ratio"], float), name


def test_every_target_is_evaluated(summary: dict[str, Any]) -> None:
    targets = {(t["target"], t["profile"]): t for t in summary["targets"]}
    expected = [
        ("bulk_enqueue ratio to raw", "postgres"),
        ("single_enqueue ratio to raw", "postgres"),
        ("batch_drain ratio to raw", "postgres"),
        ("worker_drain ratio to raw", "postgres"),
        ("wake-up latency p50", "postgres"),
        ("wake-up latency p99", "postgres"),
        ("idle queries per worker per polling interval", "postgres"),
        ("worker process peak RSS", "postgres"),
        ("batch_drain profile ratio cockroachdb/postgres", "cockroachdb"),
        ("worker_drain profile ratio cockroachdb/postgres", "cockroachdb"),
        ("worker_drain_batched profile ratio cockroachdb/postgres", "cockroachdb"),
    ]
    for key in expected:
        assert key in targets, key
        target = targets[key]
        # every target is measured: met is True or False, never unknown
        assert target["met"] in (True, False) and target["value"] is not None, (key, target)


def test_profile_counts_qcore_statements_by_their_kind() -> None:
    """``python -m bench profile`` names the statements it counts from their text."""
    from bench.idle import statement_kind
    from qcore.sql import jobs

    schema = '"s"'
    assert statement_kind(jobs.send_job(schema, table="job_common").sql) == "insert"
    assert statement_kind(jobs.insert_jobs(schema, payloads=True).sql) == "insert"
    fetch = jobs.fetch_jobs(schema, skip_locked=True, table="job_common")
    assert statement_kind(fetch.sql) == "fetch"
    assert statement_kind('INSERT INTO "s".queue (name) VALUES ($1)') != "insert"


def test_the_affinity_bench_runs_both_scenarios(pg_dsn: str) -> None:
    stdout = _bench(
        *("bench.affinity", "--dsn", pg_dsn, "--backlog", "200"),
        *("--claims", "5", "--rounds", "3", "--distinct"),
    )
    lines = stdout.splitlines()
    assert len([line for line in lines if line.startswith("plain queue, 200 waiting")]) == 4
    assert any("10 matching behind 200 (each its own pattern), behind:" in x for x in lines)


def test_the_settle_bench_times_completes_next_to_pgboss(pg_dsn: str) -> None:
    stdout = _bench(
        *("bench.settle", "--dsn", pg_dsn, "--sizes", "200,400"),
        *("--settles", "5", "--batch", "2", "--compare", "pgboss"),
    )
    rows = [line.split() for line in stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["200", "400"]
    assert all(float(ms) > 0 for row in rows for ms in row[1:3])


@pytest.mark.parametrize("store", ["postgres", "redis"])
def test_the_metrics_bench_measures_a_tick(pg_dsn: str, store: str) -> None:
    stdout = _bench(
        *("bench.metrics", "--dsn", pg_dsn, "--queues", "2", "--rates", "5"),
        *("--store", store, "--redis", REDIS_URL),
    )
    [result] = json.loads(stdout.splitlines()[-1])
    assert (result["store"], result["queues"], result["jobs_per_minute"]) == (store, 2, 5)
    assert result["round_trips"] > 0 and result["tick_ms"] > 0
    assert (result["redis_commands"] > 0) == (store == "redis")


def test_the_dashboard_bench_counts_each_page(pg_dsn: str) -> None:
    stdout = _bench("bench.dashboard", "--dsn", pg_dsn, "--queues", "2")
    rows = [line.split() for line in stdout.splitlines()[1:]]
    assert [r[1] for r in rows] == ["/", "/queues", "/queue?name=q0", "/instances",
                                    "/history?range=7d", "/metrics"]  # fmt: skip
    assert all(int(r[3]) > 0 for r in rows)  # every page read the database
