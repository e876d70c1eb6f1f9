"""The scenarios, and the loop that runs them: profile × scenario × repeat.

Each run of a scenario happens in a fresh schema (:func:`bench.env.fresh_schema`):
the parent installs qcore there with the backend profile under test, prepares
the scenario (empty queue, or the same jobs on the qcore and the raw side),
then runs each side's timed half in a child process of its own
(:mod:`bench.child`), verifies what the sides did, and drops the schema.
Which side goes first alternates between repeats; the comparison profiles
run right after the main one inside each repeat, so drift on the server
weighs the same on everything that is compared.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import idle as idle_module
from bench import pgboss
from bench.common import progress
from bench.env import QUEUE, fresh_schema
from qcore import backends
from qcore.backend import FetchStrategy, MutationStrategy

__all__ = [
    "DEFAULT_DSN",
    "FULL_JOBS",
    "GROUPS",
    "SCENARIOS",
    "BenchError",
    "Config",
    "Scenario",
    "run",
    "select_scenarios",
]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
#: the job count of a full run; ``--jobs`` below it scales the idle window and the
#: latency sample count down in proportion
FULL_JOBS = 20_000
FULL_IDLE_SECONDS = 30.0
FULL_LATENCY_SAMPLES = 500
IDLE_WORKERS = 10


#: the side the real pg-boss plays
PGBOSS = "pgboss"


class BenchError(Exception):
    """A run could not be carried out (a child failed, a check found wrong results)."""


@dataclass(frozen=True)
class Scenario:
    """One row of the table: what qcore does, and the raw baseline it is set against."""

    name: str
    label: str  # "{jobs}" is replaced by the job count
    qcore_label: str
    raw_label: str  # "" when the figure is absolute
    kind: str  # "throughput", "latency" or "idle"
    module: str  # where prepare/verify and the qcore entry live
    qcore_entry: str
    raw_entry: str = ""
    concurrency: int = 1
    batch: int = 1
    #: the raw sides: "raw" is the baseline of the ratio, others are informational
    #: (see :data:`INFORMATIONAL`)
    raw_sides: tuple[str, ...] = ("raw",)
    needs_notify: bool = False
    #: qcore's side needs two mutations of a table in one statement (MutationStrategy.CTE;
    #: the profile that splits them also claims without SKIP LOCKED, which locked claims
    #: need)
    needs_one_statement: bool = False
    #: the target ratio to the raw baseline (throughput scenarios), if the issue sets one
    target_ratio: float | None = None
    drain: bool = False
    #: the protocol of the "raw" baseline ("" plain; "merged": settle-and-claim)
    raw_variant: str = ""
    #: the scenario whose pg-boss side it is compared with (None: its own)
    pgboss_peer: str | None = None

    @property
    def peer(self) -> str:
        """The pg-boss scenario it is compared with."""
        return self.pgboss_peer or self.name

    @property
    def protocol(self) -> str:
        """What the sides' children are told to run (batched and merged variants run
        the base scenario's code with their own sizes)."""
        return self.peer.removesuffix("_batched")

    def title(self, jobs: int) -> str:
        return self.label.replace("{jobs}", f"{jobs:,}")

    def sides_for(self, skip_locked: bool) -> list[str]:
        # the lock-holding pattern needs SELECT ... FOR UPDATE SKIP LOCKED
        return [s for s in self.raw_sides if skip_locked or s != "raw_tx"]

    def raw_title(self, skip_locked: bool) -> str:
        if skip_locked:
            return self.raw_label
        return self.raw_label.replace(
            "with FOR UPDATE SKIP LOCKED", "by atomic update (the profile's strategy)"
        ).replace("claim 1 ", "claim 1 by atomic update ")


#: what each informational raw side does differently from ``raw``
INFORMATIONAL = {
    "raw_tx": "claim with FOR UPDATE SKIP LOCKED and complete in ONE transaction, one write"
    " per job",
    "raw_merged": "each statement completes the connection's last claim and claims the next"
    " (the settle-and-claim protocol: one statement per batch)",
    "raw_fk": "the same rows into a plain table that also has qcore's foreign keys to the queue"
    " table (checked per row at commit)",
    "pgboss": "the real pg-boss 12.38 (Node) doing the same on the same server, on a queue of"
    " its own in the same schema (--compare pgboss)",
}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="bulk_enqueue",
        label="bulk enqueue, {jobs} jobs",
        qcore_label="insert in batches of 1,000",
        raw_label="COPY of the same rows into an equivalent plain table",
        kind="throughput",
        module="bench.enqueue",
        qcore_entry="bench.enqueue:bulk_enqueue",
        raw_entry="bench.raw:bulk_enqueue",
        raw_sides=("raw", "raw_fk"),
        target_ratio=0.50,
    ),
    Scenario(
        name="single_enqueue",
        label="single enqueue, {jobs} jobs",
        qcore_label="send, 16 concurrent callers",
        raw_label="single-row INSERT … RETURNING, 16 connections",
        kind="throughput",
        module="bench.enqueue",
        qcore_entry="bench.enqueue:single_enqueue",
        raw_entry="bench.raw:single_enqueue",
        raw_sides=("raw", "raw_fk"),
        concurrency=16,
        target_ratio=0.60,
    ),
    Scenario(
        name="batch_drain",
        label="batch drain, {jobs} jobs",
        qcore_label="fetch(batch_size=100) + complete(ids), 4 loops",
        raw_label="claim 100 with FOR UPDATE SKIP LOCKED + complete 100, 4 connections",
        kind="throughput",
        module="bench.drain",
        qcore_entry="bench.drain:batch_drain",
        raw_entry="bench.raw:drain",
        raw_sides=("raw", "raw_merged"),
        concurrency=4,
        batch=100,
        target_ratio=0.70,
        drain=True,
    ),
    Scenario(
        name="batch_drain_settled",
        label="batch drain, settle-and-claim, {jobs} jobs",
        qcore_label="complete_and_fetch(batch_size=100), 4 loops",
        raw_label="one statement completes 100 and claims 100 with FOR UPDATE SKIP LOCKED,"
        " 4 connections",
        kind="throughput",
        module="bench.drain",
        qcore_entry="bench.drain:settled_drain",
        raw_entry="bench.raw:drain",
        concurrency=4,
        batch=100,
        drain=True,
        raw_variant="merged",
        pgboss_peer="batch_drain",
        needs_one_statement=True,
    ),
    Scenario(
        name="worker_drain",
        label="worker drain, {jobs} jobs",
        qcore_label="work(batch_size=1, local_concurrency=8), no-op handler",
        raw_label="claim 1 + complete 1, each its own transaction, 8 connections",
        kind="throughput",
        module="bench.drain",
        qcore_entry="bench.drain:worker_drain",
        raw_entry="bench.raw:drain",
        concurrency=8,
        batch=1,
        raw_sides=("raw", "raw_tx", "raw_merged"),
        target_ratio=0.60,
        drain=True,
    ),
    Scenario(
        name="worker_drain_batched",
        label="worker drain, batched, {jobs} jobs",
        qcore_label="work(batch_size=100, local_concurrency=4), no-op handler",
        raw_label="as batch drain: claim 100 with FOR UPDATE SKIP LOCKED + complete 100,"
        " 4 connections",
        kind="throughput",
        module="bench.drain",
        qcore_entry="bench.drain:worker_drain",
        raw_entry="bench.raw:drain",
        concurrency=4,
        batch=100,
        drain=True,
    ),
    Scenario(
        name="batch_drain_locked",
        label="batch drain, locked claims, {jobs} jobs",
        qcore_label="locked_fetch(batch_size=100) blocks, 4 loops",
        raw_label="one transaction selects 100 FOR UPDATE SKIP LOCKED and completes them,"
        " 4 connections",
        kind="throughput",
        module="bench.drain",
        qcore_entry="bench.drain:locked_drain",
        raw_entry="bench.raw:drain",
        concurrency=4,
        batch=100,
        drain=True,
        raw_variant="tx",
        pgboss_peer="batch_drain",
        needs_one_statement=True,
    ),
    Scenario(
        name="worker_drain_batched_locked",
        label="worker drain, batched, locked claims, {jobs} jobs",
        qcore_label="work(batch_size=100, local_concurrency=4, locked_fetch=True), no-op handler",
        raw_label="one transaction selects 100 FOR UPDATE SKIP LOCKED and completes them,"
        " 4 connections",
        kind="throughput",
        module="bench.drain",
        qcore_entry="bench.drain:locked_worker_drain",
        raw_entry="bench.raw:drain",
        concurrency=4,
        batch=100,
        drain=True,
        raw_variant="tx",
        pgboss_peer="worker_drain_batched",
        needs_one_statement=True,
    ),
    Scenario(
        name="wakeup_latency",
        label="wake-up latency",
        qcore_label="send → handler start, LISTEN/NOTIFY on, one job in flight",
        raw_label="",
        kind="latency",
        module="bench.latency",
        qcore_entry="bench.latency:wakeup_latency",
        needs_notify=True,
    ),
    Scenario(
        name="idle",
        label="idle cost",
        qcore_label=f"{IDLE_WORKERS} workers idle (polling every 2 s)",
        raw_label="",
        kind="idle",
        module="bench.idle",
        qcore_entry="bench.idle:idle",
    ),
)

BY_NAME = {s.name: s for s in SCENARIOS}
LOCKED = ("batch_drain_locked", "worker_drain_batched_locked")
DRAINS = ("batch_drain", "batch_drain_settled", "worker_drain", "worker_drain_batched", *LOCKED)
#: names that stand for several scenarios in ``--scenarios``
GROUPS: dict[str, tuple[str, ...]] = {
    "all": tuple(BY_NAME),
    "enqueue": ("bulk_enqueue", "single_enqueue"),
    "drain": DRAINS,
    "memory": DRAINS,
    "locked": LOCKED,
    "workers": (
        "worker_drain",
        "worker_drain_batched",
        "worker_drain_batched_locked",
        "wakeup_latency",
        "idle",
    ),
    "latency": ("wakeup_latency",),
    "no-workers": ("bulk_enqueue", "single_enqueue", "batch_drain", "batch_drain_settled"),
}


def select_scenarios(spec: str) -> list[Scenario]:
    """Scenarios by comma-separated names or group names, in table order."""
    wanted: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part in GROUPS:
            wanted.update(GROUPS[part])
        elif part in BY_NAME:
            wanted.add(part)
        else:
            known = ", ".join([*BY_NAME, *GROUPS])
            raise BenchError(f"unknown scenario {part!r}; known: {known}")
    return [s for s in SCENARIOS if s.name in wanted]


@dataclass
class Config:
    dsn: str = DEFAULT_DSN
    backend: str = "postgres"
    compare: list[str] = field(default_factory=list)
    jobs: int = FULL_JOBS
    repeat: int = 3
    scenarios: list[Scenario] = field(default_factory=lambda: list(SCENARIOS))
    idle_seconds: float | None = None
    latency_samples: int | None = None
    child_timeout: float = 900.0
    #: run the real pg-boss as a peer side of the scenarios it has (``--compare pgboss``)
    pgboss: bool = False

    @property
    def profiles(self) -> list[str]:
        return [self.backend, *(c for c in self.compare if c != self.backend)]

    @property
    def scale(self) -> float:
        return min(1.0, self.jobs / FULL_JOBS)

    def idle_window(self) -> float:
        if self.idle_seconds is not None:
            return self.idle_seconds
        return max(4.0, FULL_IDLE_SECONDS * self.scale)  # at least two polling intervals

    def samples(self) -> int:
        if self.latency_samples is not None:
            return self.latency_samples
        return max(10, round(FULL_LATENCY_SAMPLES * self.scale))


# --------------------------------------------------------------------------- child processes


async def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``spec["entry"]`` in ``python -m bench.child``; its JSON result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=str(ROOT),
        env=env,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(json.dumps(spec).encode()), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise BenchError(f"{spec['entry']} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise BenchError(f"{spec['entry']} failed (exit {proc.returncode}; see stderr above)")
    lines = out.decode().strip().splitlines()
    if not lines:
        raise BenchError(f"{spec['entry']} printed no result")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --------------------------------------------------------------------------- one run


def _variant(scenario: Scenario, side: str) -> str:
    """The protocol a raw side runs: its own for the informational ones, the
    scenario's for the baseline."""
    if side in ("raw_tx", "raw_merged"):
        return side.removeprefix("raw_")
    return scenario.raw_variant if side == "raw" else ""


def _queues(scenario: Scenario) -> list[tuple[str, dict[str, Any]]]:
    if scenario.kind == "latency":
        return [(QUEUE, {"notify": True})]
    if scenario.kind == "idle":
        return [(name, {}) for name in idle_module.queue_names(IDLE_WORKERS)]
    return [(QUEUE, {})]


async def run_once(
    cfg: Config, profile: str, scenario: Scenario, index: int, skip_qcore: bool
) -> dict[str, Any]:
    """One run of one scenario on one profile, in a fresh schema: each side's result,
    and the problems verification found."""
    skip_locked = backends.get(profile).fetch is FetchStrategy.SKIP_LOCKED
    module = importlib.import_module(scenario.module)
    raw_sides = scenario.sides_for(skip_locked) if scenario.raw_entry else []
    peer = cfg.pgboss and scenario.peer in pgboss.SCENARIOS
    every = [*raw_sides, PGBOSS] if peer else raw_sides
    async with fresh_schema(cfg.dsn, profile, _queues(scenario)) as env:
        extras: dict[str, Any] = await module.prepare(env, cfg.jobs, raw_sides)
        if PGBOSS in every:
            extras[PGBOSS] = await pgboss.prepare(env, scenario.peer, cfg.jobs)
        sides = ([] if skip_qcore else ["qcore"]) + every
        if index % 2:
            sides.reverse()
        out: dict[str, Any] = {}
        for side in sides:
            entry = {"qcore": scenario.qcore_entry, PGBOSS: "bench.pgboss:run"}
            spec = env.spec(
                entry=entry.get(side, scenario.raw_entry),
                scenario=scenario.protocol,
                jobs=cfg.jobs,
                concurrency=scenario.concurrency,
                batch=scenario.batch,
                skip_locked=skip_locked,
                variant=_variant(scenario, side),
                samples=cfg.samples(),
                workers=IDLE_WORKERS,
                seconds=cfg.idle_window(),
                **extras.get(side, {}),
            )
            await env.checkpoint()
            try:
                out[side] = await run_child(spec, cfg.child_timeout)
            except BenchError as exc:  # recorded; the other sides and scenarios go on
                out[side] = {"error": str(exc)}
        verify = getattr(module, "verify", None)
        if verify is not None:
            checked = [s for s in raw_sides if s in out]
            check = await verify(env, cfg.jobs, checked)
            if PGBOSS in out:
                check["problems"][PGBOSS] = await pgboss.verify(env, scenario.peer, cfg.jobs)
            out["problems"] = {
                side: found
                for side, found in check.pop("problems").items()
                if found and side in out and not {"unavailable", "error"} & set(out[side])
            }
            out["check"] = check
    return out


# --------------------------------------------------------------------------- the whole run


async def _server_facts(dsn: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT version()")
        row = await cur.fetchone()
        facts["version"] = row[0] if row else ""
        for setting in (
            "server_version",
            "synchronous_commit",
            "fsync",
            "shared_buffers",
            "max_connections",
            "default_transaction_isolation",
        ):
            try:
                cur = await conn.execute(f"SHOW {setting}")
                row = await cur.fetchone()
                facts[setting] = row[0] if row else None
            except psycopg.Error:
                facts[setting] = None
    return facts


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return ""
    return done.stdout.strip()


def _meta(cfg: Config, server: dict[str, Any]) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    safe = {k: v for k, v in conninfo_to_dict(cfg.dsn).items() if k != "password"}
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "git_commit": _git("rev-parse", "HEAD"),
        "qcore_changes": _git("status", "--porcelain", "qcore").splitlines(),
        "server": {"dsn": safe, **server},
        "backend": cfg.backend,
        "profiles": cfg.profiles,
        "fetch_strategies": {p: backends.get(p).fetch.value for p in cfg.profiles},
        "jobs": cfg.jobs,
        "repeat": cfg.repeat,
        "scenarios": [s.name for s in cfg.scenarios],
        "idle_seconds": cfg.idle_window(),
        "latency_samples": cfg.samples(),
        "idle_workers": IDLE_WORKERS,
        # other work on the machine skews every figure (ratios less: both sides alternate)
        "load_average_at_end": list(os.getloadavg()),
    }


async def run(cfg: Config) -> dict[str, Any]:
    """Every selected scenario on every profile, ``repeat`` times; the raw results
    (summarised by :func:`bench.report.summarise`)."""
    for name in cfg.profiles:
        backends.get(name)  # an unknown profile is an error before anything runs
    server = await _server_facts(cfg.dsn)
    load_at_start = list(os.getloadavg())
    progress(
        f"server {server.get('server_version')} at {cfg.dsn.split('@')[-1]};"
        f" profiles {', '.join(cfg.profiles)}; {cfg.jobs:,} jobs; repeat {cfg.repeat}"
    )
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {p: {} for p in cfg.profiles}
    notes: dict[str, dict[str, str]] = {p: {} for p in cfg.profiles}
    for scenario in cfg.scenarios:
        for profile in cfg.profiles:
            runs[profile][scenario.name] = []
            backend = backends.get(profile)
            if scenario.needs_notify and not backend.capabilities.listen_notify:
                notes[profile][scenario.name] = f"n/a: the {profile} profile has no LISTEN/NOTIFY"
            if scenario.needs_one_statement and backend.mutation is not MutationStrategy.CTE:
                notes[profile][scenario.name] = (
                    f"n/a: the {profile} profile splits mutations and claims without"
                    " SKIP LOCKED (no settle-and-claim, no locked claims)"
                )
        for index in range(cfg.repeat):
            for profile in cfg.profiles:
                if scenario.name in notes[profile] and (
                    not scenario.raw_entry or scenario.needs_one_statement
                ):
                    continue  # nothing to run: not applicable, or qcore's half is missing
                skip_qcore = scenario.name in notes[profile]
                progress(f"{profile} · {scenario.name} · run {index + 1}/{cfg.repeat}")
                result = await run_once(cfg, profile, scenario, index, skip_qcore)
                qcore = result.get("qcore", {})
                if "unavailable" in qcore:
                    notes[profile][scenario.name] = qcore["unavailable"]
                    progress(f"  qcore side unavailable: {qcore['unavailable']}")
                for side, r in result.items():
                    if isinstance(r, dict) and "error" in r:
                        progress(f"  ERROR ({side}): {r['error']}")
                for side, found in result.get("problems", {}).items():
                    progress(f"  CHECK FAILED ({side}): {'; '.join(found)}")
                runs[profile][scenario.name].append(result)
                _progress_line(scenario, result)
    meta = _meta(cfg, server)
    meta["load_average_at_start"] = load_at_start
    return {"meta": meta, "runs": runs, "notes": notes}


def _progress_line(scenario: Scenario, result: dict[str, Any]) -> None:
    parts = []
    for side in ("qcore", *scenario.raw_sides, PGBOSS):
        r = result.get(side)
        if not r or "unavailable" in r or "error" in r:
            continue
        if scenario.kind == "throughput":
            text = f"{side} {r['jobs'] / r['elapsed']:,.0f} jobs/s"
        elif scenario.kind == "latency":
            text = (
                f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
                f" (send p99 {r['send_p99_ms']:.2f}, wake after send p99 {r['wake_p99_ms']:.2f})"
            )
        else:
            text = (
                f"{r['queries_per_second']:.2f} q/s, {r['cpu_percent']:.2f}% CPU,"
                f" {r['queries_per_worker_per_interval']:.2f} q/worker/interval"
            )
        if scenario.drain and "peak_rss_mib" in r:
            text += f", {r['peak_rss_mib']:.0f} MiB"
        parts.append(text)
    if parts:
        progress("  " + " | ".join(parts))
