"""Job affinity (seed 003): a job sent with ``preferred_instance_key_pattern`` is claimed
only by a server whose instance key the pattern matches (``re.search``: unanchored,
case-sensitive), never by an anonymous one; unpatterned jobs run anywhere; a pattern that
does not compile, or one sent from an anonymous server, is refused before anything is
written; every claim by a keyed server records its key on the job."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from qcore import Boss, JobState
from qcore.conformance.helpers import count, running, set_clock
from qcore.errors import ConfigError, ValidationError
from qcore.events import Events, WarningEvent
from qcore.services.instances import InstanceRegistry
from qcore.services.maintenance import prune_affinity
from qcore.services.monitor import supervise
from qcore.verbs import jobs
from qcore.verbs.jobs.locked import check_locked_claims

pytestmark = pytest.mark.feature("affinity")

A = "a:ram-8gb:cpu-4cor"
B = "b:ram-2gb:cpu-1cor"
C = "c:ram-8gb:cpu-1cor"


def _boss(db: Any, backend: Any, schema: str, key: str | None = None, **options: Any) -> Boss:
    return Boss(db=db, backend=backend, schema=schema, supervise=False, instance_key=key, **options)


async def _claim_all(boss: Boss, queue: str) -> set[str]:
    """Everything ``boss`` may claim on ``queue`` now, as the jobs' data."""
    jobs = await boss.fetch(queue, batch_size=1000)
    return {j.data for j in jobs}


@pytest.mark.usefixtures("installed")
async def test_each_server_claims_only_what_its_key_matches(
    db: Any, backend: Any, schema: str
) -> None:
    async with (
        running(_boss(db, backend, schema, A)) as a,
        running(_boss(db, backend, schema, B)) as b,
        running(_boss(db, backend, schema, C)) as c,
        running(_boss(db, backend, schema)) as anonymous,
    ):
        await a.create_queue("reports")
        for n in range(3):
            await a.send("reports", f"8gb-{n}", preferred_instance_key_pattern="ram-8gb")
        await a.send("reports", "4cor", preferred_instance_key_pattern="ram-8gb.*cpu-4cor")
        await a.send("reports", "upper", preferred_instance_key_pattern="RAM-8GB")  # case counts
        await a.send("reports", "exact-b", preferred_instance_key_pattern=f"^{B}$")
        await a.insert("reports", [{"data": f"plain-{n}"} for n in range(2)])

        assert await _claim_all(anonymous, "reports") == {"plain-0", "plain-1"}
        assert await _claim_all(b, "reports") == {"exact-b"}
        assert await _claim_all(c, "reports") == {"8gb-0", "8gb-1", "8gb-2"}
        assert await _claim_all(a, "reports") == {"4cor"}
        # nobody's key has upper case: it waits; no server claims it by accident
        for boss in (a, b, c, anonymous):
            assert await boss.fetch("reports") == []
        assert await count(a.context(), "job", "name = 'reports' AND state = 'created'") == 1


@pytest.mark.usefixtures("installed")
async def test_a_claim_records_the_key_of_the_server_that_made_it(
    db: Any, backend: Any, schema: str
) -> None:
    async with (
        running(_boss(db, backend, schema, C)) as c,
        running(_boss(db, backend, schema)) as anonymous,
    ):
        await c.create_queue("q", retry_limit=1)
        mine = await c.send("q", 1, preferred_instance_key_pattern="ram-8gb")
        plain = await c.send("q", 2)
        [job] = await c.fetch("q")
        assert job.id == mine and job.processed_on_instance_key == C
        [other] = await anonymous.fetch("q")
        assert other.id == plain and other.processed_on_instance_key is None
        read = await c.get_job_by_id("q", mine)
        assert read is not None and read.processed_on_instance_key == C
        [found] = await c.find_jobs("q", id=plain)
        assert found.processed_on_instance_key is None
        # a retry claimed by another matching server records that one
        await c.fail("q", mine)
        async with running(_boss(db, backend, schema, A)) as a:
            await a.db.execute(  # due now, not after the retry delay
                f"UPDATE {a.context().q}.job SET start_after = now() - interval '1 minute'"
                " WHERE id = $1",
                [mine],
            )
            [again] = await a.fetch("q")
            assert again.id == mine and again.processed_on_instance_key == A


@pytest.mark.usefixtures("installed")
async def test_a_server_finds_its_jobs_behind_a_burst_for_others(
    db: Any, backend: Any, schema: str
) -> None:
    """2,000 jobs for a, queued first and at a higher priority, do not hide b's ten."""
    async with (
        running(_boss(db, backend, schema, A)) as a,
        running(_boss(db, backend, schema, B)) as b,
    ):
        await a.create_queue("q")
        burst = [
            {"data": n, "priority": 5, "preferred_instance_key_pattern": "cpu-4cor"}
            for n in range(2_000)
        ]
        for start in range(0, len(burst), 500):
            await a.insert("q", burst[start : start + 500])
        await a.insert(
            "q", [{"data": f"b{n}", "preferred_instance_key_pattern": "ram-2gb"} for n in range(10)]
        )
        jobs = await b.fetch("q", batch_size=10)
        assert sorted(j.data for j in jobs) == sorted(f"b{n}" for n in range(10))
        # a drains its own in priority order, never b's
        first = await a.fetch("q", batch_size=100)
        assert len(first) == 100 and all(j.priority == 5 for j in first)


@pytest.mark.usefixtures("installed")
async def test_a_pattern_new_to_a_server_is_claimed_at_its_next_fetch(
    db: Any, backend: Any, schema: str
) -> None:
    async with (
        running(_boss(db, backend, schema, B)) as b,
        running(_boss(db, backend, schema, A)) as a,
    ):
        await a.create_queue("q")
        await a.send("q", "for-a", preferred_instance_key_pattern="ram-8gb")
        assert await b.fetch("q") == []  # b has judged the queue's patterns: none of its own
        await a.send("q", "for-b", preferred_instance_key_pattern="ram-2gb")
        [job] = await b.fetch("q")  # the short claim reads the patterns again
        assert job.data == "for-b"


@pytest.mark.usefixtures("installed")
async def test_a_queue_that_gains_and_loses_patterned_jobs_changes_the_claim_under_it(
    db: Any, backend: Any, schema: str
) -> None:
    """A server claims a plain queue with the plain branch; when patterned jobs arrive
    there, that claim takes nothing and the server claims again on the patterned branch
    in the same fetch (settling what it settles once); once they are gone it goes back."""
    async with (
        running(_boss(db, backend, schema, A)) as a,
        running(_boss(db, backend, schema, B)) as b,
    ):
        ctx = b.context()
        await a.create_queue("q")
        await a.send("q", "plain-0")
        [first] = await b.fetch("q")
        assert first.data == "plain-0" and not ctx.affinity.patterned("q")
        await a.send("q", "for-a", preferred_instance_key_pattern="ram-8gb", priority=5)
        await a.send("q", "plain-1")
        await a.send("q", "plain-2")
        if jobs.settles_and_claims(ctx):  # keyed: on a splitting backend, one transaction
            [job] = await b.complete_and_fetch("q", [first])
        else:
            await b.complete("q", first.id)
            [job] = await b.fetch("q")
        assert job.data == "plain-1" and ctx.affinity.patterned("q")
        read = await b.get_job_by_id("q", first.id)
        assert read is not None and read.state is JobState.COMPLETED and read.retry_count == 0
        [theirs] = await a.fetch("q")
        assert theirs.data == "for-a"
        await a.complete("q", theirs.id)
        await prune_affinity(a.context(), stopping=lambda: False)
        [last] = await b.fetch("q")
        assert last.data == "plain-2" and not ctx.affinity.patterned("q")


@pytest.mark.usefixtures("installed")
async def test_a_bad_pattern_is_refused_before_anything_is_written(
    db: Any, backend: Any, schema: str
) -> None:
    async with (
        running(_boss(db, backend, schema, A)) as a,
        running(_boss(db, backend, schema)) as anonymous,
    ):
        await a.create_queue("q")
        bad: Any
        for bad in ("ram-(8gb", "[", "", 42, "x" * 1001):
            with pytest.raises(ValidationError, match="preferred_instance_key_pattern"):
                await a.send("q", 1, preferred_instance_key_pattern=bad)
            with pytest.raises(ValidationError, match=r"jobs\[1\]: preferred_instance_key"):
                await a.insert(
                    "q", [{"data": 1}, {"data": 2, "preferred_instance_key_pattern": bad}]
                )
        with pytest.raises(ConfigError, match="anonymous server"):
            await anonymous.send("q", 1, preferred_instance_key_pattern="ram-8gb")
        with pytest.raises(ConfigError, match="anonymous server"):
            await anonymous.insert("q", [{"data": 1, "preferred_instance_key_pattern": "x"}])
        ctx = a.context()
        assert await count(ctx, "job", "name = 'q'") == 0
        assert await count(ctx, "qcore_job_pattern") == 0


@pytest.mark.usefixtures("installed")
async def test_insert_keeps_order_and_ids_with_patterns(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema, A)) as a:
        await a.create_queue("q")
        given = uuid.uuid4()
        ids = await a.insert(
            "q",
            [
                {"data": 0},
                {"data": 1, "id": given, "preferred_instance_key_pattern": "cpu-4cor"},
                {"data": 2, "preferred_instance_key_pattern": "nobody"},
            ],
        )
        assert ids is not None and len(ids) == 3 and ids[1] == given
        ctx = a.context()
        rows = await ctx.db.execute(
            f"SELECT id, pattern FROM {ctx.q}.qcore_job_pattern ORDER BY pattern"
        )
        assert [(r["id"], r["pattern"]) for r in rows] == [(given, "cpu-4cor"), (ids[2], "nobody")]
        assert sorted(j.data for j in await a.fetch("q", batch_size=10)) == [0, 1]


@pytest.mark.usefixtures("installed")
async def test_a_send_dropped_by_its_policy_leaves_no_pattern(
    db: Any, backend: Any, schema: str
) -> None:
    async with running(_boss(db, backend, schema, A)) as a:
        await a.create_queue("q", policy="short")
        first = await a.send("q", 1, singleton_key="k", preferred_instance_key_pattern="ram")
        dropped = await a.send("q", 2, singleton_key="k", preferred_instance_key_pattern="ram")
        assert first is not None and dropped is None
        assert await count(a.context(), "qcore_job_pattern") == 1


@pytest.mark.usefixtures("installed")
async def test_maintenance_forgets_patterns_of_ended_jobs_and_attribution_of_gone_ones(
    db: Any, backend: Any, schema: str
) -> None:
    async with running(_boss(db, backend, schema, A)) as a:
        ctx = a.context()
        await a.create_queue("q")
        done = await a.send("q", 1, preferred_instance_key_pattern="ram")
        waiting = await a.send("q", 2, preferred_instance_key_pattern="nobody")
        [job] = await a.fetch("q")
        assert job.id == done
        await a.complete("q", done)
        await prune_affinity(ctx, stopping=lambda: False)
        rows = await ctx.db.execute(f"SELECT id FROM {ctx.q}.qcore_job_pattern")
        assert [r["id"] for r in rows] == [waiting]  # the queued job keeps its pattern
        assert await count(ctx, "qcore_job_processed") == 1  # its job still exists
        await a.delete_job("q", done)
        await prune_affinity(ctx, stopping=lambda: False)
        assert await count(ctx, "qcore_job_processed") == 0


@pytest.mark.usefixtures("installed")
async def test_work_runs_only_matching_jobs(db: Any, backend: Any, schema: str) -> None:
    from qcore.conformance.helpers import until

    async with (
        running(_boss(db, backend, schema, B)) as b,
        running(_boss(db, backend, schema, A)) as a,
    ):
        await a.create_queue("q")
        seen: list[Any] = []

        async def handler(jobs: list[Any]) -> None:
            seen.extend(j.data for j in jobs)

        await b.work("q", handler, polling_interval_seconds=0.5, batch_size=5)
        await a.insert(
            "q",
            [{"data": f"a{n}", "preferred_instance_key_pattern": "ram-8gb"} for n in range(5)]
            + [{"data": f"b{n}", "preferred_instance_key_pattern": "ram-2gb"} for n in range(3)]
            + [{"data": "any"}],
        )
        await until(lambda: len(seen) == 4, timeout=30, what="b's jobs")
        assert sorted(seen) == ["any", "b0", "b1", "b2"]
        assert await count(a.context(), "job", "name = 'q' AND state = 'created'") == 5


@pytest.mark.usefixtures("installed")
async def test_a_locked_claim_honours_affinity(db: Any, backend: Any, schema: str) -> None:
    async with (
        running(_boss(db, backend, schema, B)) as b,
        running(_boss(db, backend, schema, A)) as a,
    ):
        try:
            check_locked_claims(b.context())
        except ConfigError as exc:
            pytest.skip(f"no locked claims here: {exc}")
        await a.create_queue("q")
        await a.send("q", "a", preferred_instance_key_pattern="ram-8gb")
        mine = await a.send("q", "b", preferred_instance_key_pattern="ram-2gb")
        assert mine is not None
        async with b.locked_fetch("q", batch_size=10) as batch:
            assert [j.id for j in batch.jobs] == [mine]
            assert batch.jobs[0].processed_on_instance_key == B
        read = await a.get_job_by_id("q", mine)
        assert read is not None and read.state is JobState.COMPLETED
        assert read.processed_on_instance_key == B


@pytest.mark.usefixtures("installed")
async def test_jobs_processed_are_counted_per_key(db: Any, backend: Any, schema: str) -> None:
    async with running(_boss(db, backend, schema, C)) as c:
        await c.create_queue("q")
        await c.insert("q", [{"data": n} for n in range(7)])
        assert len(await c.fetch("q", batch_size=5)) == 5
        assert len(await c.fetch("q", batch_size=5)) == 2
        registry = c.services.get("registry", InstanceRegistry)
        assert registry is not None
        await registry.exclusive(registry.run_pass)
        page = await c.get_instances(offset=0, limit=10)
        [mine] = [i for i in page if i.id == c.instance_id]
        assert mine.instance_key == C and mine.jobs_processed == 7
        assert page.total == len(page) >= 1
        assert len(await c.get_instances(offset=page.total)) == 0
        with pytest.raises(ValidationError, match="offset"):
            await c.get_instances(offset=-1)
        with pytest.raises(ValidationError, match="not both"):
            await c.get_instances(offset=0, after=c.instance_id)


@pytest.mark.usefixtures("installed")
async def test_an_operator_sees_each_pattern_and_whether_a_live_server_matches_it(
    db: Any, backend: Any, schema: str
) -> None:
    """A job's pattern is on the job; the queue's waiting jobs are counted by pattern
    with the live servers each matches; a pattern no live server matches, ready longer
    than ``warning_affinity_unmatched_seconds``, is warned of as ``affinity_unmatched``
    by the supervise pass (the schema's clock runs ahead instead of a wait)."""
    # beats every hour: still live when the clock runs ten minutes ahead
    sender = _boss(db, backend, schema, A, instance_heartbeat_seconds=3600)
    async with running(sender) as a:
        await a.create_queue("render")
        gpu = await a.send("render", "g1", preferred_instance_key_pattern="gpu")
        await a.send("render", "g2", preferred_instance_key_pattern="gpu")
        await a.send("render", "big", preferred_instance_key_pattern="ram-8gb")
        await a.send("render", "plain")
        assert gpu is not None
        job = await a.get_job_by_id("render", gpu)
        assert job is not None and job.preferred_instance_key_pattern == "gpu"
        [found] = [j for j in await a.find_jobs("render") if j.data == "big"]
        assert found.preferred_instance_key_pattern == "ram-8gb"

        backlog = await a.get_affinity_backlog("render")
        assert [(b.pattern, b.waiting, b.live_matches) for b in backlog] == [
            ("gpu", 2, 0),
            ("ram-8gb", 1, 1),
        ]
        assert all(b.ready_seconds is not None and b.ready_seconds < 300 for b in backlog)

        ctx = a.context()
        events = Events()
        warned: list[WarningEvent] = []
        events.on("warning", warned.append)
        await supervise(ctx, events=events)
        assert [w for w in warned if w.type == "affinity_unmatched"] == []  # not for long yet
        await set_clock(ctx, 600)
        try:
            await supervise(ctx, events=events)
        finally:
            await set_clock(ctx, 0)
        [unmatched] = [w for w in warned if w.type == "affinity_unmatched"]
        assert unmatched.data["queue"] == "render" and unmatched.data["pattern"] == "gpu"
        assert unmatched.data["waiting"] == 2 and "no live server" in unmatched.message
