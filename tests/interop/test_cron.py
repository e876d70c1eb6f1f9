"""Cron shared with the real pg-boss 12.38 on one schema: a schedule either runtime
writes is fired by the other, both file an occurrence under the same key and slot, and
a fleet of both sends one job per occurrence. Local PostgreSQL only."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from typing import Any

import pytest

from qcore import Boss, cron
from qcore.context import Context
from qcore.services.timekeeper import SEND_IT, cron_pass, forward
from qcore.verbs import jobs, queues, schedules
from tests.interop.pgboss import Stepped, in_thread, interop_marks

pytestmark = interop_marks()

#: pg-boss's timekeeper at its quickest, for a few seconds of real time
TIMEKEEPING = {"schedule": True, "cronMonitorIntervalSeconds": 1, "cronWorkerIntervalSeconds": 1}


def _pgboss_for(dsn: str, ctx: Context, seconds: float, *actions: dict[str, Any]) -> Any:
    from tests.interop.pgboss import run_ok

    return run_ok(
        {
            "connectionString": dsn,
            "schema": ctx.schema_spec,
            "migrate": False,
            "options": TIMEKEEPING,
            "actions": [
                {"op": "start"},
                *actions,
                {"op": "sleep", "args": [int(seconds * 1000)]},
                {"op": "stop"},
            ],
        },
        timeout=seconds + 120,
    )


async def _send_it_rows(ctx: Context) -> list[dict[str, Any]]:
    return await ctx.db.execute(
        f"SELECT singleton_key, to_char(singleton_on, 'YYYY-MM-DD HH24:MI:SS') AS slot, data"
        f" FROM {ctx.q}.job WHERE name = $1 ORDER BY singleton_on",
        [SEND_IT],
    )


MARCH = dt.datetime(2026, 3, 6, 12, 0, 7, tzinfo=dt.timezone.utc)  # a Friday
OCTOBER = dt.datetime(2026, 10, 24, 22, 0, tzinfo=dt.timezone.utc)

#: expressions whose previews must agree, from a moment: every quarter hour; weekdays at
#: nine across New York's change to summer time; 02:30 and every 20 minutes of 02:00 in
#: Berlin, times that do not exist one night; 01:15 in New York, a time that happens twice
#: one night; every half hour through Berlin's repeated hour; a leap day; seconds first
PREVIEWS = [
    ("*/15 * * * *", None, MARCH, 6),
    ("0 9 * * 1-5", "America/New_York", MARCH, 8),
    ("30 2 * * *", "Europe/Berlin", MARCH, 25),
    ("*/20 2 * * *", "Europe/Berlin", MARCH, 75),
    ("15 1 * * *", "America/New_York", OCTOBER, 10),
    ("*/30 * * * *", "Europe/Berlin", OCTOBER, 12),
    ("0 0 29 2 *", "UTC", MARCH, 3),
    ("*/20 * * * * *", "Asia/Kolkata", MARCH, 5),
]


async def test_schedule_previews_match_pgboss(pg_dsn: str, shared: Context) -> None:
    """``preview_schedule`` gives the times pg-boss's ``previewSchedule`` gives, from the
    same moment, in every zone and through both changes of summer time."""
    boss = Boss(pg_dsn, schema=shared.schema, migrate=False, supervise=False, schedule=False)
    async with boss:
        ours = [
            boss.preview_schedule(expression, tz=tz, from_=start, count=count)
            for expression, tz, start, count in PREVIEWS
        ]
    actions = [
        {"op": "previewSchedule", "args": [e, {"tz": tz, "from": at.isoformat(), "count": n}]}
        for e, tz, at, n in PREVIEWS
    ]
    results = await asyncio.to_thread(_pgboss_for, pg_dsn, shared, 0, *actions)
    theirs = [r["result"] for r in results[1 : 1 + len(actions)]]
    for (expression, tz, start, count), mine, pgs in zip(PREVIEWS, ours, theirs, strict=True):
        assert len(mine) == len(pgs) == count, expression
        assert [t.isoformat() for t in mine] == [
            dt.datetime.fromisoformat(t.replace("Z", "+00:00")).isoformat() for t in pgs
        ], (expression, tz)
        assert all(t > start for t in mine)


async def test_pgboss_schedule_fired_by_qcore(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, SEND_IT)
    await queues.create_queue(ctx, "node_reports")
    await in_thread(
        pg_dsn,
        ctx,
        {
            "op": "schedule",
            "args": [
                "node_reports",
                "* * * * *",
                {"from": "node"},
                {"key": "k1", "priority": 6, "tz": "Europe/Paris", "retryLimit": 4},
            ],
        },
    )
    [row] = await schedules.get_schedules(ctx, "node_reports")
    assert (row.key, row.timezone, row.kind) == ("k1", "Europe/Paris", "cron")
    assert schedules.send_options_of(row.options) == {"priority": 6, "retry_limit": 4}
    assert (await cron_pass(ctx, None, interval_seconds=30)).claimed
    assert await forward(ctx, None, await jobs.fetch(ctx, SEND_IT, batch_size=50)) == 1
    [job] = await jobs.fetch(ctx, "node_reports", batch_size=5, include_metadata=True)
    assert job.data == {"from": "node"} and job.priority == 6 and job.retry_limit == 4


async def test_qcore_schedule_fired_by_pgboss(pg_dsn: str, shared: Context) -> None:
    ctx = shared
    await queues.create_queue(ctx, "py_reports")
    await schedules.schedule(
        ctx,
        "py_reports",
        "* * * * *",
        {"from": "python"},
        key="k_2",
        priority=3,
        singleton_key="s",
        retry_limit=5,
    )
    results = await asyncio.to_thread(
        _pgboss_for, pg_dsn, ctx, 4, {"op": "getSchedules", "args": ["py_reports"]}
    )
    [listed] = results[1]["result"]
    assert listed["cron"] == "* * * * *" and listed["key"] == "k_2"
    # pg-boss filed each occurrence as qcore would have: same key, slot as its minute
    # (two when its few seconds of running crossed a minute boundary)
    filed = await _send_it_rows(ctx)
    assert 1 <= len(filed) <= 2
    for occurrence in filed:
        assert occurrence["singleton_key"] == cron.occurrence_key("py_reports", "k_2")
        assert occurrence["data"]["slot"] == occurrence["slot"]
        slot = dt.datetime.strptime(occurrence["slot"], "%Y-%m-%d %H:%M:%S")
        slot = slot.replace(tzinfo=dt.timezone.utc)
        assert cron.throttle_slot(slot + dt.timedelta(seconds=59)) == occurrence["slot"]
    # and pg-boss's forwarder sent them with qcore's stored options
    sent = await jobs.find_jobs(ctx, "py_reports")
    assert 1 <= len(sent) <= len(filed)
    for job in sent:
        assert job.data == {"from": "python"} and job.priority == 3
        assert job.singleton_key == "s" and job.retry_limit == 5
    [row] = await schedules.get_schedules(ctx, "py_reports")
    assert row.last_job_id in {job.id for job in sent}


#: the mixed fleet's span on the stepped clock, and how far the clock moves a step
FLEET_MINUTES = 10
FLEET_STEP_MS = 10_000


async def test_a_mixed_fleet_sends_one_job_per_occurrence(pg_dsn: str, shared: Context) -> None:
    """Two qcore instances and one pg-boss instance on one stepped clock, all at once:
    pg-boss's timekeeper at its quickest (a pass and a send-it fetch every second) while
    the clock moves ten seconds a step, and in the same step both qcore instances try a
    pass (every second allowed) and forward what they fetch, concurrently with it and with
    each other, for ten simulated minutes. One job per minute slot, all under one key,
    each forwarded once by whichever runtime fetched it."""
    ctx = shared
    await queues.create_queue(ctx, SEND_IT)
    await queues.create_queue(ctx, "fleet")
    await schedules.schedule(ctx, "fleet", "* * * * * *", {"tick": True})  # every second
    node, fleet = await _on_one_clock(pg_dsn, ctx, 0, pgboss_intervals=(1, 1), qcores=2)
    warned: list[set[Any]] = [set() for _ in fleet]

    async def turn(boss: Boss, seen: set[Any]) -> None:
        await cron_pass(boss.context(), None, interval_seconds=1, warned=seen)
        sender = boss.context()
        await forward(sender, None, await jobs.fetch(sender, SEND_IT, batch_size=50))

    try:
        for boss in fleet:
            await boss.start()
        for _ in range(FLEET_MINUTES * 60_000 // FLEET_STEP_MS):
            await asyncio.gather(
                asyncio.to_thread(node.tick, FLEET_STEP_MS),
                *(turn(boss, seen) for boss, seen in zip(fleet, warned, strict=True)),
            )
        last = fleet[0].context()
        while batch := await jobs.fetch(last, SEND_IT, batch_size=50):
            await forward(last, None, batch)
    finally:
        for boss in fleet:
            await boss.stop()
        errors = await asyncio.to_thread(node.stop)
    assert errors == []
    rows = await _send_it_rows(ctx)
    slots = [r["slot"] for r in rows]
    assert len(slots) >= FLEET_MINUTES - 1 and len(slots) == len(set(slots))  # one per minute
    assert {r["singleton_key"] for r in rows} == {"fleet__"}
    # consecutive minutes: no pass of either runtime left one out
    times = [dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S") for s in slots]
    assert all(b - a == dt.timedelta(minutes=1) for a, b in itertools.pairwise(times))
    # one job per occurrence, whichever runtime fetched the send-it job
    assert len(await jobs.find_jobs(ctx, "fleet")) == len(rows)


def _on_the_test_clock(dsn: str) -> str:
    """``dsn`` for sessions that read pg-boss's TestClock (``pgboss.test_clock = 'on'``)."""
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}options=-c%20pgboss.test_clock%3Don"


async def _on_one_clock(
    dsn: str, ctx: Context, hour: int, *, pgboss_intervals: tuple[int, int], qcores: int
) -> tuple[Stepped, list[Boss]]:
    """A pg-boss instance on a TestClock starting tomorrow at ``hour``:00:30, its cron
    monitor and send-it worker every ``pgboss_intervals`` seconds, and ``qcores`` qcore
    instances (not started, keeping no time of their own) reading that clock."""
    tomorrow = dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=1)
    start = dt.datetime.combine(tomorrow, dt.time(hour, 0, 30), dt.timezone.utc)
    monitor, worker = pgboss_intervals
    spec = {
        "connectionString": dsn,
        "schema": ctx.schema_spec,
        "start": start.isoformat(),
        "options": {"cronMonitorIntervalSeconds": monitor, "cronWorkerIntervalSeconds": worker},
    }
    node = await asyncio.to_thread(Stepped, spec)
    clocked = _on_the_test_clock(dsn)
    fleet = [
        Boss(clocked, schema=ctx.schema_spec, supervise=False, schedule=False, max=2)
        for _ in range(qcores)
    ]
    return node, fleet


#: the simulated day in halves, each a test of its own, so that the two run side by side
HALF_DAY_MINUTES = 12 * 60


@pytest.mark.parametrize("starts_at_hour", [0, 12], ids=["morning", "evening"])
async def test_three_qcore_instances_and_pgboss_for_a_simulated_day(
    pg_dsn: str, shared: Context, starts_at_hour: int
) -> None:
    """One pg-boss instance on its TestClock and three qcore instances reading that same
    clock, stepped a minute at a time through half a simulated day (the other half is the
    other parameter): pg-boss's timekeeper runs its passes (every 45 s, so that its
    passes and qcore's, every 30 s, take turns) and its send-it worker within each step,
    then each qcore instance tries a pass and one of them forwards. Every schedule gets
    exactly one job per occurrence, in every minute."""
    ctx = shared
    await queues.create_queue(ctx, SEND_IT)
    for name in ("minutely", "five"):
        await queues.create_queue(ctx, name)
    await schedules.schedule(ctx, "minutely", "* * * * *")
    await schedules.schedule(ctx, "five", "*/5 * * * *", key="k")
    node, fleet = await _on_one_clock(
        pg_dsn, ctx, starts_at_hour, pgboss_intervals=(45, 30), qcores=3
    )
    claimed = 0
    try:
        for boss in fleet:
            await boss.start()
        warned: list[set[Any]] = [set() for _ in fleet]
        for step in range(HALF_DAY_MINUTES):
            await asyncio.to_thread(node.tick, 60_000)
            for boss, seen in zip(fleet, warned, strict=True):
                done = await cron_pass(boss.context(), None, interval_seconds=30, warned=seen)
                claimed += bool(done.claimed)
            sender = fleet[step % 3].context()
            await forward(sender, None, await jobs.fetch(sender, SEND_IT, batch_size=50))
        ours = fleet[0].context()
        while batch := await jobs.fetch(ours, SEND_IT, batch_size=50):
            await forward(ours, None, batch)
    finally:
        for boss in fleet:
            await boss.stop()
        errors = await asyncio.to_thread(node.stop)
    assert errors == []
    assert 0 < claimed < HALF_DAY_MINUTES  # qcore took some of the passes, pg-boss the others
    rows = await _send_it_rows(ctx)
    minutes = [r["slot"] for r in rows if r["singleton_key"] == "minutely__"]
    fives = [r["slot"] for r in rows if r["singleton_key"] == "five__k"]
    times = [dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S") for s in minutes]
    assert len(minutes) >= HALF_DAY_MINUTES - 1 and len(set(minutes)) == len(minutes)
    assert all(b - a == dt.timedelta(minutes=1) for a, b in itertools.pairwise(times))
    assert fives == [m for m in minutes if int(m[14:16]) % 5 == 0]
    # one job sent per occurrence, whichever runtime filed or forwarded it
    assert len(await jobs.find_jobs(ctx, "minutely")) == len(minutes)
    assert len(await jobs.find_jobs(ctx, "five")) == len(fives)
