"""Cron schedules on every backend: the ``schedule`` rows, the checks before anything is
written, one job per (schedule, occurrence) however many instances run the pass, the
forwarder, and the clock-skew warning. Time is the schema's clock (``set_clock``),
never a sleep: each pass is judged against the database's ``now`` it reports."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import count, running, set_clock, states, totals, until
from qcore.context import Context
from qcore.errors import QueueNotFoundError, ValidationError
from qcore.events import WarningEvent
from qcore.services.timekeeper import SEND_IT, ClockSkew, CronPass, Timekeeper, cron_pass, forward
from qcore.verbs import schedules
from qcore.verbs.jobs import enqueue, fetch
from qcore.verbs.queues import create_queue

pytestmark = pytest.mark.feature("cron")


async def _slots(ctx: Context) -> list[tuple[str, str]]:
    """(singleton_key, slot) of every send-it job."""
    rows = await ctx.db.execute(
        f"SELECT singleton_key, to_char(singleton_on, 'YYYY-MM-DD HH24:MI:SS') AS slot"
        f" FROM {ctx.q}.job WHERE name = $1 ORDER BY 2, 1",
        [SEND_IT],
    )
    return [(r["singleton_key"], r["slot"]) for r in rows]


def _minutes(first: dt.datetime, last: dt.datetime) -> list[str]:
    """Every minute slot from ``first``'s to ``last``'s."""
    start = first.replace(second=0, microsecond=0)
    out = []
    while start <= last:
        out.append(start.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
        start += dt.timedelta(minutes=1)
    return out


async def test_schedule_rows_as_pg_boss_writes_them(ctx: Context) -> None:
    await create_queue(ctx, "reports")
    await schedules.schedule(
        ctx,
        "reports",
        "0 9 * * 1-5",
        {"kind": "daily"},
        tz="Europe/Paris",
        priority=4,
        retry_limit=1,
        group_id="g",
        start_after=30,
    )
    await schedules.schedule(ctx, "reports", "*/15 * * * *", key="quarter", missed="once")
    [daily, quarter] = await schedules.get_schedules(ctx, "reports")
    assert (daily.key, daily.cron, daily.timezone, daily.kind) == (
        "",
        "0 9 * * 1-5",
        "Europe/Paris",
        "cron",
    )
    assert daily.data == {"kind": "daily"}
    assert daily.options == {
        "priority": 4,
        "retryLimit": 1,
        "group": {"id": "g"},
        "startAfter": 30,
        "tz": "Europe/Paris",
        "key": "",
    }
    assert schedules.send_options_of(daily.options) == {
        "priority": 4,
        "retry_limit": 1,
        "group_id": "g",
        "start_after": 30,
    }
    assert quarter.key == "quarter" and quarter.missed == "once" and daily.missed == "skip"
    assert quarter.last_job_id is None

    await schedules.schedule(ctx, "reports", "0 10 * * *", {"kind": "later"})  # replaces
    [again] = await schedules.get_schedules(ctx, "reports", "")
    assert again.cron == "0 10 * * *" and again.timezone == "UTC"
    assert again.created_on == daily.created_on and again.updated_on >= daily.updated_on
    assert await count(ctx, "schedule") == 2

    await create_queue(ctx, "a")
    await schedules.schedule(ctx, "a", "* * * * *")
    page = await schedules.get_schedules(ctx, limit=2)
    assert [(s.name, s.key) for s in page] == [("a", ""), ("reports", "")]
    rest = await schedules.get_schedules(ctx, limit=2, after=page[-1])
    assert [(s.name, s.key) for s in rest] == [("reports", "quarter")]
    assert await schedules.unschedule(ctx, "reports", "quarter") is True
    assert await schedules.unschedule(ctx, "reports", "quarter") is False
    assert await schedules.get_schedules(ctx, "reports", "quarter") == []


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"cron_expression": "61 * * * *"}, ValidationError, "not a valid cron expression"),
        ({"cron_expression": "* * *"}, ValidationError, "has 3 fields"),
        ({"cron_expression": ""}, ValidationError, "non-empty cron expression"),
        ({"cron_expression": "FREQ=DAILY;BYHOUR=9"}, ValidationError, "recurrence rule"),
        ({"tz": "Mars/Olympus_Mons"}, ValidationError, "not a known time zone"),
        ({"tz": ""}, ValidationError, "IANA time zone"),
        ({"key": "bad key!"}, ValidationError, "key 'bad key!'"),
        ({"missed": "all"}, ValidationError, "missed must be one of skip, once"),
        ({"priority": "high"}, ValidationError, "priority"),
        (
            {"id": "00000000-0000-0000-0000-000000000001"},
            ValidationError,
            "unknown schedule option id",
        ),
        ({"data": {"x": float("nan")}}, ValidationError, "JSON"),
        ({"name": "nowhere"}, QueueNotFoundError, "'nowhere' does not exist"),
        ({"name": "bad name!"}, ValidationError, "queue name"),
    ],
)
async def test_schedule_refuses_bad_input_before_writing(
    ctx: Context, arguments: dict[str, Any], error: type[Exception], match: str
) -> None:
    await create_queue(ctx, "q")
    before = await totals(ctx), await count(ctx, "schedule")
    call = {"name": "q", "cron_expression": "* * * * *", **arguments}
    with pytest.raises(error, match=match):
        await schedules.schedule(ctx, **call)
    assert (await totals(ctx), await count(ctx, "schedule")) == before


async def test_get_schedules_refuses_bad_paging(ctx: Context) -> None:
    for kwargs, match in (
        ({"limit": 0}, "limit must be an integer from 1 to 100000"),
        ({"limit": 100_001}, "limit must be"),
        ({"key": "k"}, "give name too"),
        ({"after": "q"}, "after must be a Schedule or a"),
    ):
        with pytest.raises(ValidationError, match=match):
            await schedules.get_schedules(ctx, **kwargs)


async def test_one_job_per_occurrence_however_many_passes(ctx: Context) -> None:
    await create_queue(ctx, SEND_IT)
    await create_queue(ctx, "q")
    await schedules.schedule(ctx, "q", "* * * * *", {"n": 1})
    first = await cron_pass(ctx, None, interval_seconds=30)
    assert first.claimed and [(n, k) for n, k, _ in first.filed] == [("q", "")]
    refused = await cron_pass(ctx, None, interval_seconds=30)  # this interval's pass is taken
    assert not refused.claimed and refused.filed == []
    assert refused.elapsed is not None and refused.elapsed < 30
    # another instance whose claim comes later in the same slot files the same occurrence:
    # the insert drops it (same key, same slot)
    again = await enqueue.insert_in_slots(
        ctx, SEND_IT, [({"name": "q", "key": ""}, "q__", first.filed[0][2])]
    )
    assert again == []
    assert await _slots(ctx) == [("q__", first.filed[0][2])]


async def test_three_instances_for_three_simulated_hours(ctx: Context) -> None:
    """Every 30 s of the schema's clock, three instances attempt the pass (one wins); an
    every-minute and an every-5-minutes schedule get exactly one job per minute slot."""
    await create_queue(ctx, SEND_IT)
    for name in ("minutely", "five_min"):
        await create_queue(ctx, name)
    await schedules.schedule(ctx, "minutely", "* * * * *")
    await schedules.schedule(ctx, "five_min", "*/5 * * * *", key="k_1")
    passes: list[CronPass] = []
    warned: list[set[Any]] = [set(), set(), set()]
    for step in range(3 * 60 * 2):
        await set_clock(ctx, step * 30)
        for instance in warned:
            passes.append(await cron_pass(ctx, None, interval_seconds=30, warned=instance))
    claimed = [p for p in passes if p.claimed]
    assert len(claimed) == 3 * 60 * 2  # one per interval, never two
    minutes = _minutes(claimed[0].now, claimed[-1].now)
    slots = await _slots(ctx)
    assert [slot for key, slot in slots if key == "minutely__"] == minutes
    fives = [slot for key, slot in slots if key == "five\\_min__k_1"]
    assert fives == [m for m in minutes if int(m[14:16]) % 5 == 0]
    assert len(fives) in (36, 37)


async def test_missed_once_catches_up_one_occurrence(ctx: Context) -> None:
    await create_queue(ctx, SEND_IT)
    await create_queue(ctx, "skip")
    await create_queue(ctx, "once")
    await schedules.schedule(ctx, "skip", "0 * * * *")  # hourly, on the hour
    await schedules.schedule(ctx, "once", "0 * * * *", missed="once")
    first = await cron_pass(ctx, None, interval_seconds=30)  # the last pass before a gap
    assert first.claimed
    # no pass for hours: the next one lands two minutes past an hour
    target = first.now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=6, minutes=2)
    await set_clock(ctx, (target - first.now).total_seconds())
    late = await cron_pass(ctx, None, interval_seconds=30)
    assert late.claimed
    hour = (target - dt.timedelta(minutes=2)).strftime("%Y-%m-%d %H:%M:%S")
    assert [(n, slot) for n, _, slot in late.filed] == [("once", hour)]  # one, the latest


async def test_forward_sends_and_records_the_job(ctx: Context) -> None:
    await create_queue(ctx, SEND_IT)
    await create_queue(ctx, "target")
    await schedules.schedule(ctx, "target", "* * * * *", {"v": 1}, priority=7, key="k")
    assert (await cron_pass(ctx, None, interval_seconds=30)).claimed
    due = await fetch(ctx, SEND_IT, batch_size=50)
    assert len(due) == 1
    assert await forward(ctx, None, due) == 1
    [job] = await fetch(ctx, "target", batch_size=5, include_metadata=True)
    assert job.data == {"v": 1} and job.priority == 7
    [row] = await schedules.get_schedules(ctx, "target", "k")
    assert row.last_job_id == job.id


async def test_forward_reports_a_failed_send_and_goes_on(ctx: Context) -> None:
    from qcore.events import Events

    await create_queue(ctx, SEND_IT)
    await create_queue(ctx, "ok")
    await create_queue(ctx, "keyed", policy="key_strict_fifo")  # needs a singleton_key
    await schedules.schedule(ctx, "ok", "* * * * *")
    await schedules.schedule(ctx, "keyed", "* * * * *")
    assert (await cron_pass(ctx, None, interval_seconds=30)).claimed
    events = Events()
    errors: list[BaseException] = []
    events.on("error", errors.append)
    assert await forward(ctx, events, await fetch(ctx, SEND_IT, batch_size=50)) == 1
    assert len(errors) == 1 and "'keyed'" in str(errors[0])
    assert await count(ctx, "job", "name = $1", "ok") == 1


async def test_an_unusable_row_is_skipped_and_reported_once(ctx: Context) -> None:
    from qcore.events import Events

    await create_queue(ctx, SEND_IT)
    await create_queue(ctx, "q")
    await schedules.schedule(ctx, "q", "* * * * *", key="good")
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.schedule (name, key, cron, timezone) VALUES ('q', 'bad',"
        " 'not cron', 'UTC'), ('q', 'zone', '* * * * *', 'Nowhere/Land')"
    )
    events = Events()
    seen: list[WarningEvent] = []
    events.on("warning", seen.append)
    warned: set[Any] = set()
    result = await cron_pass(ctx, events, interval_seconds=30, warned=warned)
    assert [k for _, k, _ in result.filed] == ["good"]
    assert sorted(w.data["key"] for w in seen) == ["bad", "zone"]
    assert {w.type for w in seen} == {"invalid_schedule"}
    await set_clock(ctx, 30)
    await cron_pass(ctx, events, interval_seconds=30, warned=warned)
    assert len(seen) == 2  # not again while the rows stay as they are


async def test_clock_skew_warning(ctx: Context) -> None:
    from qcore.events import Events

    events = Events()
    seen: list[WarningEvent] = []
    events.on("warning", seen.append)
    check = ClockSkew(lambda: ctx, events, 600)
    assert abs(await check.check()) < 30 and seen == []
    await set_clock(ctx, 120)  # the database two minutes ahead: this process is slower
    assert 90 < await check.check() < 150
    [warning] = seen
    assert warning.type == "clock_skew" and warning.data["direction"] == "slower"
    assert 90 < warning.data["seconds"] < 150
    behind = ClockSkew(lambda: ctx, events, 600, clock=lambda: 1e10)  # far in the future
    assert await behind.check() < -60
    assert seen[-1].data["direction"] == "faster"


async def test_a_started_boss_fires_a_schedule(
    ctx: Context, db: Any, backend: Any, schema: str
) -> None:
    await create_queue(ctx, "tick")
    await schedules.schedule(ctx, "tick", "* * * * *", {"hello": "world"})
    boss = Boss(db=db, backend=backend, schema=schema, cron_worker_interval_seconds=1)
    async with running(boss):  # the first pass runs at start; the forwarder polls each second
        for _ in range(300):  # up to 30 s
            jobs = await boss.find_jobs("tick")
            if jobs:
                break
            await asyncio.sleep(0.1)
        assert [j.data for j in jobs] == [{"hello": "world"}]

        async def recorded() -> Any:  # after the sends, in a statement of its own
            [row] = await boss.get_schedules("tick")
            return row.last_job_id

        assert await until(recorded, timeout=30, what="last_job_id") == jobs[0].id
        assert boss.worker_statuses() == []  # the forwarder is the timekeeper's own


async def test_every_pass_says_whether_cron_is_in_use(ctx: Context) -> None:
    """Claimed or not, a pass answers whether a schedule exists or an occurrence waits on
    the send-it queue: what lets every instance's forwarder idle while neither does."""
    await create_queue(ctx, SEND_IT)
    first = await cron_pass(ctx, None, interval_seconds=30)
    assert first.claimed and not first.in_use and first.filed == []
    await create_queue(ctx, "q")
    await schedules.schedule(ctx, "q", "0 0 1 1 *")  # due once a year: files nothing now
    second = await cron_pass(ctx, None, interval_seconds=30)
    assert not second.claimed and second.in_use  # another instance's interval: told all the same
    await schedules.unschedule(ctx, "q")
    await enqueue.send(ctx, SEND_IT, {"name": "q", "key": ""})  # filed, not yet forwarded
    assert (await cron_pass(ctx, None, interval_seconds=30)).in_use
    [waiting] = await fetch(ctx, SEND_IT)
    assert await forward(ctx, None, [waiting]) == 1
    assert not (await cron_pass(ctx, None, interval_seconds=30)).in_use


async def test_the_forwarder_idles_while_cron_is_not_in_use(
    ctx: Context, db: Any, backend: Any, schema: str
) -> None:
    """A Boss whose first pass finds no schedule makes no claim on the send-it queue (an
    occurrence put there by hand waits), until a pass finds cron in use again; then the
    forwarder sends it."""
    await create_queue(ctx, "tick")
    boss = Boss(
        db=db,
        backend=backend,
        schema=schema,
        cron_worker_interval_seconds=1,
        cron_monitor_interval_seconds=45,  # no second pass during the test unless asked
        supervise=False,
    )
    async with running(boss):
        timekeeper = boss.services.get("timekeeper", Timekeeper)
        assert timekeeper is not None
        forwarder = timekeeper._forwarder
        assert forwarder is not None

        async def idle() -> bool:
            # the pass at start (detached) has found nothing, and no claim the forwarder
            # began before that is still in flight (it would take what is sent next)
            return not timekeeper.cron_in_use and forwarder._gate.polling

        await until(idle, timeout=30, what="the first pass")
        await enqueue.send(ctx, SEND_IT, {"name": "tick", "key": "", "data": {"n": 1}})
        await asyncio.sleep(5)  # five forwarder polls' worth
        assert await states(ctx, SEND_IT) == {"created": 1}  # not claimed: the forwarder idles
        await set_clock(ctx, 60)  # the pass's interval has gone by: the next pass is ours
        await timekeeper.run_pass()
        assert timekeeper.cron_in_use

        async def forwarded() -> bool:
            return await states(ctx, "tick") == {"created": 1}

        await until(forwarded, timeout=30, what="the waiting occurrence forwarded")
