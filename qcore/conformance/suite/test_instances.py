"""The instance registry: each ``Boss`` writes its row at start(), on each heartbeat and
at stop(), as pg-boss 12.38 writes its own; ``get_instances`` pages through them with a
``live`` flag; crash restarts are counted from the rows of earlier lives; maintenance
deletes rows quiet for seven days and bounds the dead ones. Time is the schema's clock
(``set_clock``), not sleeps, wherever a row must look old."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

from qcore import Boss
from qcore.conformance.helpers import running, set_clock, until
from qcore.context import Context
from qcore.errors import ConfigError, ValidationError
from qcore.job import Instance, Job
from qcore.services.instances import InstanceRegistry
from qcore.services.maintenance import Maintenance, prune
from qcore.services.notifier import Notifier
from qcore.sql import instances as sql
from qcore.verbs.instances import get_instances

pytestmark = pytest.mark.feature("instances")


def _boss(db: Any, backend: Any, schema: str, **options: Any) -> Boss:
    return Boss(db=db, backend=backend, schema=schema, supervise=False, **options)


async def _mine(boss: Boss) -> Instance:
    [row] = [i for i in await boss.get_instances(limit=100_000) if i.id == boss.instance_id]
    return row


async def _beat(boss: Boss) -> None:
    """The server's next heartbeat, now."""
    registry = boss.services.get("registry", InstanceRegistry)
    assert registry is not None
    await registry.exclusive(registry.run_pass)


async def _working(boss: Boss) -> list[uuid.UUID]:
    """Queue ``q`` and a worker on it polling every 0.5 s; the ids of the jobs it ran."""
    await boss.create_queue("q")
    handled: list[uuid.UUID] = []

    async def handler(batch: list[Job]) -> None:
        handled.extend(j.id for j in batch)

    await boss.work("q", handler, polling_interval_seconds=0.5)
    return handled


async def _insert_dead(ctx: Context, n: int, *, name: str | None, days_ago: float = 0) -> None:
    """``n`` stopped rows of lives named ``name``, started one after another."""
    for k in range(n):
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.instance (id, name, host, pid, version, node_version,"
            " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats,"
            " persist_warnings, started_on, heartbeat_on, stopped_on)"
            " VALUES ($1, $2, 'elsewhere', 1, 'x', 'x', 30, false, false, false, false, false,"
            f" {ctx.q}.job_now() - ($3 || ' seconds')::interval,"
            f" {ctx.q}.job_now() - ($3 || ' seconds')::interval,"
            f" {ctx.q}.job_now() - ($3 || ' seconds')::interval)",
            [uuid.uuid4(), name, str(days_ago * 86400 + 1000 - k)],
        )


@pytest.mark.usefixtures("installed")
async def test_a_started_boss_registers_its_row(db: Any, backend: Any, schema: str) -> None:
    boss = _boss(db, backend, schema, instance_name="api-1", persist_warnings=True)
    async with running(boss) as b:

        async def handler(batch: list[Job]) -> None:
            return None

        await b.create_queue("emails")
        worker = await b.work("emails", handler, local_concurrency=2, batch_size=5)
        row = await _mine(b)
        assert row.name == "api-1" and row.live and row.stopped_on is None
        assert row.version and row.node_version.startswith("Python ")
        assert row.heartbeat_seconds == 30 and row.persist_warnings and not row.supervise
        assert row.pool_max is None  # a db= adapter: its pool is the caller's
        assert row.config["adapter"] == "custom" and row.config["persistWarnings"] is True
        assert row.crash_restarts == 0 and row.crash_restarts_since is None
        assert row.metrics is not None and row.metrics["cpu"] is None  # no rate yet
        assert row.metrics["rss"] > 0 and row.metrics["cpuLimit"] > 0
        # the next heartbeat (asked for now) carries the worker and a CPU rate
        await _beat(b)
        row = await _mine(b)
        [entry] = row.workers
        assert entry["id"] == worker and entry["queue"] == "emails"
        assert entry["localConcurrency"] == 2 and entry["batchSize"] == 5
        assert row.metrics is not None and row.metrics["cpu"] is not None
        started = row.started_on
        ctx = b.context()
    [row] = [i for i in await get_instances(ctx) if i.id == boss.instance_id]
    assert not row.live and row.stopped_on is not None
    # the same object started again: the same id, a new life
    async with running(boss) as b:
        again = await _mine(b)
        assert again.id == row.id and again.live and again.started_on > started


@pytest.mark.usefixtures("installed")
async def test_the_seed_queries_work_on_qcore_rows(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema, instance_name="w")) as b:

        async def handler(batch: list[Job]) -> None:
            return None

        await b.create_queue("emails")
        await b.work("emails", handler, local_concurrency=3)
        await _beat(b)
        q = b.context().q
        live = await db.execute(
            f"SELECT name, host, pid, version FROM {q}.instance WHERE stopped_on IS NULL"
            " AND heartbeat_on >= now() - heartbeat_seconds * 3 * interval '1 second'"
        )
        assert [r["name"] for r in live] == ["w"]
        working = await db.execute(
            f"SELECT i.name, i.host, w->>'localConcurrency' AS concurrency FROM {q}.instance i,"
            " jsonb_array_elements(i.workers) w WHERE w->>'queue' = 'emails'"
        )
        assert [(r["name"], r["concurrency"]) for r in working] == [("w", "3")]


@pytest.mark.usefixtures("installed")
async def test_get_instances_pages_and_refuses_bad_input(
    db: Any, backend: Any, schema: str
) -> None:
    async with running(_boss(db, backend, schema)) as b:
        ctx = b.context()
        await _insert_dead(ctx, 3, name="old")
        every = await b.get_instances()
        assert len(every) == 4 and [i.live for i in every] == [False, False, False, True]
        first = await b.get_instances(limit=2)
        rest = await b.get_instances(limit=10, after=first[-1].id)
        assert [i.id for i in first + rest] == [i.id for i in every]
        assert await b.get_instances(after=every[-1].id) == []
        for bad in (0, 100_001, "10"):
            with pytest.raises(ValidationError, match="limit must be an integer from 1"):
                await b.get_instances(limit=bad)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="after must be an instance id"):
            await b.get_instances(after="nope")
        with pytest.raises(ValidationError, match="no longer exists"):
            await b.get_instances(after=uuid.uuid4())


def test_instance_options_are_checked_at_construction() -> None:
    for options, message in (
        ({"instance_name": ""}, "instance_name must be a non-empty string"),
        ({"instance_heartbeat_seconds": 0}, "instance_heartbeat_seconds must be an integer"),
        ({"instance_heartbeat_seconds": 1.5}, "instance_heartbeat_seconds must be an integer"),
    ):
        with pytest.raises(ConfigError, match=message):
            Boss("postgresql://localhost/x", **options)


@pytest.mark.usefixtures("installed")
async def test_register_instance_false_writes_no_row(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema, register_instance=False)) as b:
        assert await b.get_instances() == []


@pytest.mark.usefixtures("installed")
async def test_a_process_that_only_sends_stays_out_of_the_registry(
    db: Any, backend: Any, schema: str
) -> None:
    """Left to qcore (``register_instance`` unset), a ``Boss`` that neither supervises,
    keeps time nor has a key writes no row while it only sends; its first ``work()``
    registers it; ``register_instance=True`` registers a sender at start."""
    quiet: dict[str, Any] = {"supervise": False, "schedule": False}
    async with running(Boss(db=db, backend=backend, schema=schema, **quiet)) as b:
        await b.create_queue("q")
        assert await b.send("q") is not None
        assert await b.get_instances() == []
        await b.work("q", lambda jobs: None)
        assert [i.id for i in await b.get_instances()] == [b.instance_id]
    asked = Boss(db=db, backend=backend, schema=schema, register_instance=True, **quiet)
    async with running(asked) as b:
        assert b.instance_id in {i.id for i in await b.get_instances()}
    working_first = Boss(db=db, backend=backend, schema=schema, **quiet)
    await working_first.work("q", lambda jobs: None)  # before start: registers at start
    async with running(working_first) as b:
        assert b.instance_id in {i.id for i in await b.get_instances()}
    with pytest.raises(ConfigError, match="register_instance must be True, False or None"):
        Boss(db=db, backend=backend, schema=schema, register_instance="yes")  # type: ignore[arg-type]


@pytest.mark.usefixtures("installed")
async def test_crash_restarts_count_the_lives_that_ended_without_stop(
    db: Any, backend: Any, schema: str
) -> None:
    """Two earlier lives of this name on this host went quiet without stop(); one before
    them stopped (the streak starts after it)."""
    async with running(_boss(db, backend, schema)) as setup:
        ctx = setup.context()
    host = __import__("socket").gethostname()
    for k, stopped in enumerate((True, False, False)):
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.instance (id, name, host, pid, version, node_version,"
            " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats,"
            " persist_warnings, started_on, heartbeat_on, stopped_on)"
            " VALUES ($1, 'crashy', $2, $3, 'x', 'x', 30, false, false, false, false, false,"
            f" {ctx.q}.job_now() - ($4 || ' seconds')::interval,"
            f" {ctx.q}.job_now() - ($4 || ' seconds')::interval + interval '10 seconds',"
            f" CASE WHEN $5 THEN {ctx.q}.job_now() END)",
            [uuid.uuid4(), host, 100_000 + k, str(3600 - k * 600), stopped],
        )
    async with running(_boss(db, backend, schema, instance_name="crashy")) as b:
        row = await _mine(b)
        assert row.crash_restarts == 2 and row.crash_restarts_since is not None
    # another name on the host is not counted with them
    async with running(_boss(db, backend, schema, instance_name="other")) as b:
        assert (await _mine(b)).crash_restarts == 0


@pytest.mark.usefixtures("installed")
async def test_a_predecessor_still_reading_live_is_counted_once_it_goes_quiet(
    db: Any, backend: Any, schema: str
) -> None:
    async with running(_boss(db, backend, schema)) as setup:
        ctx = setup.context()
    host = __import__("socket").gethostname()
    await ctx.db.execute(
        f"INSERT INTO {ctx.q}.instance (id, name, host, pid, version, node_version,"
        " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats,"
        " persist_warnings, started_on, heartbeat_on)"
        " VALUES ($1, 'late', $2, 99999, 'x', 'x', 30, false, false, false, false, false,"
        f" {ctx.q}.job_now() - interval '20 seconds', {ctx.q}.job_now() - interval '5 seconds')",
        [uuid.uuid4(), host],
    )
    async with running(_boss(db, backend, schema, instance_name="late")) as b:
        assert (await _mine(b)).crash_restarts == 0  # it might be a live sibling
        await set_clock(ctx, 120)  # four of its heartbeats later: quiet
        await _beat(b)
        assert (await _mine(b)).crash_restarts == 1
        await set_clock(ctx, 0)


@pytest.mark.usefixtures("installed")
async def test_maintenance_deletes_old_rows_and_bounds_the_dead(
    db: Any, backend: Any, schema: str
) -> None:
    async with running(_boss(db, backend, schema, instance_name="keep")) as b:
        ctx = b.context()
        await _insert_dead(ctx, 2, name="gone", days_ago=8)
        await _insert_dead(ctx, 25, name="loop")
        await b.supervise()
        names = [i.name for i in await b.get_instances()]
        assert "gone" not in names and names.count("loop") == 25 and "keep" in names
        # a new life named "loop" keeps its name's 20 newest dead rows
        async with running(_boss(db, backend, schema, instance_name="loop")):
            pass
        rows = await db.execute(
            f"SELECT count(*)::int AS n FROM {ctx.q}.instance WHERE name = 'loop'"
            " AND stopped_on IS NOT NULL"
        )
        assert rows[0]["n"] == 21  # 20 kept, and the life that just stopped


@pytest.mark.usefixtures("installed")
async def test_trim_keeps_the_newest_dead_rows_in_all(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema)) as b:
        ctx = b.context()
        await ctx.db.execute(
            f"INSERT INTO {ctx.q}.instance (id, name, host, pid, version, node_version,"
            " heartbeat_seconds, supervise, schedule, migrate, persist_queue_stats,"
            " persist_warnings, started_on, heartbeat_on, stopped_on)"
            " SELECT gen_random_uuid(), 'n' || i, 'h', 1, 'x', 'x', 30, false, false, false,"
            " false, false, now() - i * interval '1 second', now() - i * interval '1 second',"
            f" now() FROM generate_series(1, {sql.INSTANCE_DEAD_KEPT + 5}) AS i"
        )
        await b.supervise()
        left = await db.execute(f"SELECT name FROM {ctx.q}.instance WHERE stopped_on IS NOT NULL")
        assert len(left) == sql.INSTANCE_DEAD_KEPT
        assert {r["name"] for r in left} == {f"n{i}" for i in range(1, sql.INSTANCE_DEAD_KEPT + 1)}
        assert (await _mine(b)).live  # the live row is never trimmed


@pytest.mark.usefixtures("installed")
async def test_heartbeats_move_the_row(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema, instance_heartbeat_seconds=1)) as b:
        first = (await _mine(b)).heartbeat_on

        async def moved() -> bool:
            return (await _mine(b)).heartbeat_on > first

        await until(moved, timeout=30, what="a heartbeat")
        assert (await _mine(b)).started_on <= first < dt.datetime.now(dt.timezone.utc)


# -- instance keys: pause, resume, remove --------------------------------------------------


@pytest.mark.usefixtures("installed")
async def test_a_paused_server_claims_nothing_until_resumed(
    db: Any, backend: Any, schema: str
) -> None:
    server = _boss(db, backend, schema, instance_key="b:ram-2gb:cpu-1cor")
    admin = _boss(db, backend, schema, register_instance=False)
    seen: list[tuple[str, Any]] = []
    server.on("instance_paused", lambda e: seen.append(("paused", e)))
    server.on("instance_resumed", lambda e: seen.append(("resumed", e)))
    async with running(server) as b, running(admin) as a:
        handled = await _working(b)
        await a.pause_instance("b:ram-2gb:cpu-1cor")
        await _beat(b)
        assert b.paused and seen[-1][0] == "paused"
        [me] = [i for i in await a.get_instances() if i.id == b.instance_id]
        assert me.instance_key == "b:ram-2gb:cpu-1cor" and me.paused
        sent = await a.send("q")
        assert sent is not None
        await asyncio.sleep(2)  # four polls of a worker that is not claiming
        assert handled == [] and (await a.get_job_by_id("q", sent)).state.value == "created"  # type: ignore[union-attr]
        await a.resume_instance("b:ram-2gb:cpu-1cor")
        await _beat(b)
        assert not b.paused and seen[-1][0] == "resumed"
        await until(lambda: handled == [sent], timeout=30, what="the job, once resumed")


@pytest.mark.usefixtures("installed")
async def test_a_server_pausing_itself_claims_nothing_from_that_moment(
    db: Any, backend: Any, schema: str
) -> None:
    """``pause_instance`` on a ``Boss``'s own key holds its workers at once, not from its
    next heartbeat (every 30 s here); resuming it lets them claim at once."""
    server = _boss(db, backend, schema, instance_key="self:gpu")
    async with running(server) as b:
        await b.pause_instance("self:gpu")
        assert b.paused
        handled = await _working(b)
        sent = await b.send("q")
        assert sent is not None
        await asyncio.sleep(3)  # six polls of a worker that is not claiming
        assert handled == []
        job = await b.get_job_by_id("q", sent)
        assert job is not None and job.state == "created"
        await b.resume_instance("self:gpu")
        assert not b.paused
        await until(lambda: handled == [sent], timeout=30, what="the job, once resumed")


@pytest.mark.usefixtures("installed")
async def test_a_pause_from_another_process_holds_the_server_within_its_polling_interval(
    db: Any, backend: Any, schema: str
) -> None:
    """Without LISTEN/NOTIFY, a pause stored by another process is read by the server's
    pause watch every polling interval of its workers (0.5 s here), long before its next
    heartbeat (30 s): its workers claim nothing from then, and it acknowledges the pause
    in its row; a resume is read the same way."""
    server = _boss(db, backend, schema, instance_key="w:cpu", use_listen_notify=False)
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(server) as b, running(admin) as a:
        handled = await _working(b)
        await a.pause_instance("w:cpu")
        await until(lambda: b.paused, timeout=15, what="the pause, read between heartbeats")

        async def acknowledged() -> Instance | None:
            me = await _mine(b)
            return me if me.pause_acknowledged else None

        me = await until(acknowledged, timeout=15, what="the pause's acknowledgement")
        assert me.paused and me.pause_status == "paused"
        assert me.pause_acknowledged_on is not None and me.pause_changed_on is not None
        assert me.pause_acknowledged_on >= me.pause_changed_on
        sent = await a.send("q")
        assert sent is not None
        await asyncio.sleep(2)  # four polls of a worker that is not claiming
        assert handled == []
        await a.resume_instance("w:cpu")
        await until(lambda: not b.paused, timeout=15, what="the resume")
        await until(lambda: handled == [sent], timeout=30, what="the job, once resumed")
        me = await until(acknowledged, timeout=15, what="the resume's acknowledgement")
        assert me.pause_status == ""


@pytest.mark.usefixtures("installed")
async def test_a_pause_is_requested_until_the_server_acknowledges_it(
    db: Any, backend: Any, schema: str
) -> None:
    """A server that has not read its pause yet (no worker, no listener: its heartbeat
    reads it) shows "pause requested"; from its next heartbeat, "paused", acknowledged."""
    server = _boss(db, backend, schema, instance_key="idle:cpu", use_listen_notify=False)
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(server) as b, running(admin) as a:
        await a.pause_instance("idle:cpu")
        me = await _mine(b)
        assert me.paused and not me.pause_acknowledged and me.pause_status == "pause requested"
        [listed] = await a.list_instances(search="idle:cpu")
        assert listed.pause_status == "pause requested"
        assert not b.paused
        await _beat(b)
        assert b.paused
        assert (await _mine(b)).pause_status == "paused"
        await a.resume_instance("idle:cpu")
        assert (await _mine(b)).pause_status == "resume requested"
        await _beat(b)
        assert not b.paused and (await _mine(b)).pause_status == ""


@pytest.mark.usefixtures("installed")
async def test_a_pause_reaches_a_listening_server_at_once(
    db: Any, backend: Any, schema: str
) -> None:
    """Where LISTEN/NOTIFY reaches the server, the pause's notice makes it read its pause
    at once: here its workers poll every 60 s and it beats every 30 s, and it is paused
    (and acknowledges it) within seconds."""
    server = _boss(db, backend, schema, instance_key="n:cpu", use_listen_notify=True)
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(server) as b, running(admin) as a:
        notifier = b.services.get("notifier", Notifier)
        if notifier is None or not notifier.available:
            pytest.skip("needs LISTEN/NOTIFY through this backend and adapter (listen_notify)")
        await b.create_queue("q")
        await b.work("q", lambda jobs: None, polling_interval_seconds=60)
        await a.pause_instance("n:cpu")
        await until(lambda: b.paused, timeout=15, what="the pause, told by NOTIFY")

        async def acknowledged() -> bool:
            return (await _mine(b)).pause_status == "paused"

        await until(acknowledged, timeout=15, what="the pause's acknowledgement")
        await a.resume_instance("n:cpu")
        await until(lambda: not b.paused, timeout=15, what="the resume, told by NOTIFY")


@pytest.mark.usefixtures("installed")
async def test_pause_resume_and_remove_are_told_to_every_listening_instance(
    db: Any, backend: Any, schema: str
) -> None:
    """Where LISTEN/NOTIFY reaches them, every instance emits ``instance_paused``,
    ``instance_resumed`` and ``instance_removed`` when any process does one (with the
    id of the ``Boss`` that did it); that ``Boss`` emits each once."""
    admin = _boss(db, backend, schema, register_instance=False, use_listen_notify=True)
    other = _boss(db, backend, schema, instance_key="o:cpu", use_listen_notify=True)
    heard: dict[str, list[tuple[str, Any]]] = {"admin": [], "other": []}
    for who, boss in (("admin", admin), ("other", other)):
        for action in ("paused", "resumed", "removed"):
            boss.on(
                f"instance_{action}",
                lambda e, who=who, action=action: heard[who].append((action, e)),
            )
    async with running(admin) as a, running(other) as o:
        for boss in (a, o):
            notifier = boss.services.get("notifier", Notifier)
            if notifier is None or not notifier.available:
                pytest.skip("needs LISTEN/NOTIFY through this backend and adapter (listen_notify)")
        await a.pause_instance("gone:gpu")  # a key no server has: removable at once
        await a.resume_instance("gone:gpu")
        await a.remove_instance("gone:gpu")
        await until(lambda: len(heard["other"]) == 3, timeout=15, what="the three notices")
        assert [(action, e["instance_key"]) for action, e in heard["other"]] == [
            ("paused", "gone:gpu"),
            ("resumed", "gone:gpu"),
            ("removed", "gone:gpu"),
        ]
        assert {e["by"] for _, e in heard["other"]} == {str(a.instance_id)}
        # notices reach a listener in commit order: once the admin hears the other's
        # pause, its own three notices have come back to it too, and were not re-emitted
        await o.pause_instance("marker:x")
        await until(lambda: len(heard["admin"]) == 4, timeout=15, what="the other's notice")
        assert [(action, e.get("by")) for action, e in heard["admin"]] == [
            ("paused", None),
            ("resumed", None),
            ("removed", None),
            ("paused", str(o.instance_id)),
        ]


@pytest.mark.usefixtures("installed")
async def test_an_instance_that_hears_no_notify_learns_of_them_at_its_heartbeat(
    db: Any, backend: Any, schema: str
) -> None:
    """Without LISTEN/NOTIFY (the engine has none, or it is turned off), every registered
    instance still emits ``instance_paused``, ``instance_resumed`` and
    ``instance_removed`` for another process's change, each once, at its next heartbeat
    (from the notice the change wrote); a change from before it started is not news."""
    admin = _boss(db, backend, schema, register_instance=False, use_listen_notify=False)
    async with running(admin) as a:
        await a.pause_instance("before:x")  # before the other instance starts
        other = _boss(db, backend, schema, instance_key="o:cpu", use_listen_notify=False)
        heard: list[tuple[str, Any]] = []
        for action in ("paused", "resumed", "removed"):
            other.on(f"instance_{action}", lambda e, action=action: heard.append((action, e)))
        async with running(other) as o:
            await _beat(o)
            assert heard == []
            await a.pause_instance("gone:gpu")  # a key no server has: removable at once
            await a.resume_instance("gone:gpu")
            await a.remove_instance("gone:gpu")
            assert heard == []  # nothing reaches it between heartbeats
            await _beat(o)
            assert [(action, e["instance_key"]) for action, e in heard] == [
                ("paused", "gone:gpu"),
                ("resumed", "gone:gpu"),
                ("removed", "gone:gpu"),
            ]
            assert {e["by"] for _, e in heard} == {str(a.instance_id)}
            await _beat(o)  # the next beat reads the same minute again: nothing twice
            assert len(heard) == 3
            await o.pause_instance("marker:x")  # its own change: emitted once, by its verb
            await _beat(o)
            assert [action for action, _ in heard] == ["paused", "resumed", "removed", "paused"]
            assert "by" not in heard[-1][1]


async def test_maintenance_forgets_notices_after_a_day(ctx: Context) -> None:
    table = f"{ctx.q}.qcore_instance_notice"
    await ctx.db.execute(
        f"INSERT INTO {table} (at, instance_key, action) VALUES"
        " (now() - interval '25 hours', 'old:x', 'paused'), (now(), 'new:x', 'paused')"
    )
    await prune(ctx, Maintenance(), stopping=lambda: False)
    rows = await ctx.db.execute(f"SELECT instance_key FROM {table}")
    assert [r["instance_key"] for r in rows] == ["new:x"]


@pytest.mark.usefixtures("installed")
async def test_a_pause_survives_the_servers_restart(db: Any, backend: Any, schema: str) -> None:
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(admin) as a:
        await a.pause_instance("c:ram-8gb")  # ahead of any server with the key
        async with running(_boss(db, backend, schema, instance_key="c:ram-8gb")) as b:
            assert b.paused
        async with running(_boss(db, backend, schema, instance_key="c:ram-8gb")) as b:
            assert b.paused  # a new process with the key: still paused
        await a.resume_instance("c:ram-8gb")
        async with running(_boss(db, backend, schema, instance_key="c:ram-8gb")) as b:
            assert not b.paused


@pytest.mark.usefixtures("installed")
async def test_remove_is_refused_until_the_server_has_been_gone_30_minutes(
    db: Any, backend: Any, schema: str
) -> None:
    admin = _boss(db, backend, schema, register_instance=False)
    async with running(admin) as a:
        ctx = a.context()
        async with running(_boss(db, backend, schema, instance_key="gone")):
            pass
        removed: list[Any] = []
        a.on("instance_removed", removed.append)
        try:
            await set_clock(ctx, 29 * 60)
            with pytest.raises(ValidationError, match="seen 29 minutes ago"):
                await a.remove_instance("gone")
            await set_clock(ctx, 31 * 60)
            await a.remove_instance("gone")
        finally:
            await set_clock(ctx, 0)
        assert removed == [{"instance_key": "gone"}]
        with pytest.raises(ValidationError, match="nothing to remove"):
            await a.remove_instance("gone")
        with pytest.raises(ValidationError, match="nothing to resume"):
            await a.resume_instance("gone")


@pytest.mark.usefixtures("installed")
async def test_bad_instance_keys_are_refused(
    db: Any, backend: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(_boss(db, backend, schema, register_instance=False)) as a:
        for bad in ("", "x" * 201, 7):
            for verb in (a.pause_instance, a.resume_instance, a.remove_instance):
                with pytest.raises(ValidationError, match="instance_key must be"):
                    await verb(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="instance_key must be a non-empty string"):
        Boss("postgresql://localhost/x", instance_key="")
    with pytest.raises(ConfigError, match="needs register_instance=True"):
        Boss("postgresql://localhost/x", instance_key="k", register_instance=False)
    monkeypatch.setenv("QCORE_INSTANCE_KEY", "from-env")
    assert Boss("postgresql://localhost/x").instance_key == "from-env"
    assert Boss("postgresql://localhost/x", instance_key="given").instance_key == "given"
