"""The same mistake gets the same error in every verb: an option the verb does not take
and a bad argument value both raise ``ValidationError`` (a ``ValueError``), before
anything is written; a bad constructor option is a ``ConfigError``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qcore import Boss
from qcore.errors import ConfigError, ValidationError
from tests.conftest import admin_execute

pytestmark = [pytest.mark.feature("errors"), pytest.mark.postgres]

SCHEMA = "qcore_verb_errors"


async def _noop(jobs: Any) -> None:
    return None


# (verb, positional arguments, a bad value as keyword arguments or None when the bad
# value is positional: then the second tuple holds the bad positional arguments)
CASES: list[tuple[str, tuple[Any, ...], tuple[Any, ...], dict[str, Any]]] = [
    ("create_queue", ("fresh",), ("bad name!",), {}),
    ("update_queue", ("q",), ("q",), {"retry_limit": -1}),
    ("delete_queue", ("q",), ("",), {}),
    ("get_queue", ("q",), ("bad name!",), {}),
    ("get_queues", (["q"],), (["bad name!"],), {}),
    ("delete_queued_jobs", ("q",), ("",), {}),
    ("delete_stored_jobs", ("q",), ("",), {}),
    ("delete_all_jobs", ("q",), ("bad name!",), {}),
    ("get_blocked_keys", ("q",), ("",), {}),
    ("send", ("q", {}), ("q", {}), {"priority": "high"}),
    ("send_after", ("q", {}, 60), ("q", {}, "not a time"), {}),
    ("send_throttled", ("q", {}, 60), ("q", {}, -1), {}),
    ("send_debounced", ("q", {}, 60), ("q", {}, 0), {}),
    ("insert", ("q", [{"data": 1}]), ("q", [{"data": 1, "colour": "red"}]), {}),
    ("update", ("q", {}), ("q", {}), {"singleton_key": "k", "priority": "high"}),
    ("upsert", ("q", {}), ("q", {}), {"singleton_key": "k", "retry_limit": -1}),
    ("redrive", ("q",), ("q",), {"limit": 0}),
    ("fetch", ("q",), ("q",), {"batch_size": 0}),
    ("fetch", ("q",), ("q",), {"group_concurrency": {"tiers": {"gold": 2}}}),
    ("complete", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("fail", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("cancel", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("resume", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("restore", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("retry", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("delete_job", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("touch", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("get_job_by_id", ("q", uuid.uuid4()), ("q", "not-a-uuid"), {}),
    ("find_jobs", ("q",), ("q",), {"queued": "yes"}),
    ("work", ("q", _noop), ("q", _noop), {"batch_size": -1}),
    ("work", ("q", _noop), ("q", _noop), {"group_concurrency": 1, "local_group_concurrency": 1}),
    ("off_work", ("q",), (), {}),
    ("supervise", ("q",), ("bad name!",), {}),
    ("start", (), (), {"attempts": 0}),
    ("stop", (), (), {"timeout": -1}),
]


@pytest.fixture
async def boss(pg_dsn: str) -> AsyncIterator[Boss]:
    instance = Boss(pg_dsn, schema=SCHEMA, supervise=False)
    await instance.start()
    await instance.create_queue("q")
    await instance.send("q", {"n": 1})
    try:
        yield instance
    finally:
        await instance.db.execute_script(f"DROP SCHEMA {SCHEMA} CASCADE")
        await instance.stop()


async def _totals(boss: Boss) -> tuple[int, int]:
    (row,) = await boss.db.execute(
        f"SELECT (SELECT count(*) FROM {SCHEMA}.queue)::int AS queues,"
        f" (SELECT count(*) FROM {SCHEMA}.job)::int AS jobs"
    )
    return row["queues"], row["jobs"]


@pytest.mark.parametrize(("verb", "good", "bad", "bad_options"), CASES, ids=[c[0] for c in CASES])
async def test_unknown_options_and_bad_values_are_validation_errors(
    boss: Boss, verb: str, good: tuple[Any, ...], bad: tuple[Any, ...], bad_options: dict[str, Any]
) -> None:
    method = getattr(boss, verb)
    before = await _totals(boss)
    with pytest.raises(ValidationError, match=r"\(\): .*colour_of_the_sky.*; it takes: ") as info:
        await method(*good, colour_of_the_sky="blue")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValidationError) as info:
        await method(*bad, **bad_options)
    assert isinstance(info.value, ValueError)
    assert await _totals(boss) == before  # nothing written
    assert boss.started or verb == "stop"


def test_bad_constructor_options_are_config_errors() -> None:
    for options in (
        {"max": 0},
        {"supervise_interval_seconds": -1},
        {"backend": "nosuchdb"},
        {"superviseIntervalSeconds": 60},  # pg-boss's spelling: not an option here
    ):
        with pytest.raises(ConfigError) as info:
            Boss("postgresql://localhost/x", **options)
        assert not isinstance(info.value, ValidationError), options
    with pytest.raises(ConfigError, match=r"Boss\(\): got an unexpected keyword .*it takes: "):
        Boss("postgresql://localhost/x", shema="app")  # type: ignore[call-arg]


async def test_a_db_argument_qcore_cannot_use_is_a_validation_error(boss: Boss) -> None:
    with pytest.raises(ValidationError, match="execute_sql"):
        await boss.send("q", {}, db=object())


def test_sync_boss_verbs_raise_the_same(pg_dsn: str) -> None:
    from qcore import SyncBoss

    with SyncBoss(pg_dsn, schema=SCHEMA + "_sync", supervise=False) as boss:
        try:
            boss.create_queue("q")
            with pytest.raises(ValidationError, match="unknown option colour"):
                boss.send("q", {}, colour="blue")  # type: ignore[call-arg]
            with pytest.raises(ValidationError, match="unknown option colour"):
                boss.work("q", _noop, colour="blue")  # type: ignore[call-arg]
            with pytest.raises(ValidationError, match="batch_size"):
                boss.fetch("q", batch_size=0)
        finally:
            admin_execute(f"DROP SCHEMA {SCHEMA}_sync CASCADE", pg_dsn)


def test_handler_registration_checks_its_options_at_once() -> None:
    boss = Boss("postgresql://localhost/x", supervise=False)  # never started
    with pytest.raises(ValidationError, match="unknown work option batchSize; known: batch_size"):
        boss.handler("q", batchSize=10)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="batch_size"):
        boss.handler("q", batch_size=0)
    with pytest.raises(ValidationError, match="queue name"):
        boss.handler("bad name!")
    with pytest.raises(ValidationError, match="handler must be callable"):
        boss.handler("q")(42)  # type: ignore[arg-type]
    assert boss.handlers == []  # nothing registered by a refused call


def _nested(depth: int) -> Any:
    """A list ``depth`` levels deep."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


LONE = "caf\udce9"  # what os.fsdecode makes of a file name that is not UTF-8

# (verb, arguments, keyword arguments, what the error says): values the database would
# refuse, each once reaching it as a driver error (or a raw RecursionError on the way)
UNSTORABLE: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("send", ("q", {"file": LONE}), {}, "lone surrogate"),
    ("send", ("q", {LONE: 1}), {}, "lone surrogate"),
    ("send", ("q", {}), {"singleton_key": LONE}, "singleton_key contains a lone surrogate"),
    ("send", ("q", {}), {"group_id": LONE}, "group_id contains a lone surrogate"),
    ("send", ("q", {}), {"singleton_key": "k" * 3 * 2**20}, "singleton_key is 3145728 bytes"),
    ("send", ("q", {}), {"start_after": 1e13}, "start_after must be from 0 to"),
    ("send", ("q", _nested(400)), {}, "deeper than 100 levels"),
    ("insert", ("q", [{"data": 1}, {"data": _nested(400)}]), {}, r"jobs\[1\]: .*deeper"),
    ("insert", ("q", [{"data": 1}, {"data": [LONE]}]), {}, r"jobs\[1\]: .*lone surrogate"),
    ("complete", ("q", uuid.uuid4(), {"out": LONE}), {}, "output contains a lone surrogate"),
    ("complete", ("q", uuid.uuid4(), _nested(400)), {}, "output nests"),
    ("find_jobs", ("q",), {"data": {"k": LONE}}, "lone surrogate"),
    ("find_jobs", ("q",), {"data": _nested(400)}, "deeper"),
    ("publish", ("ev\x00", {}), {}, "event contains a NUL"),
    ("publish", (LONE, {}), {}, "event contains a lone surrogate"),
    ("subscribe", (LONE, "q"), {}, "event contains a lone surrogate"),
    ("fetch", ("q",), {"ignore_groups": [LONE]}, "lone surrogate"),
    ("find_jobs", ("q",), {"key": LONE}, "key contains a lone surrogate"),
    ("browse_jobs", ("q",), {"key": "a\x00"}, "key contains a NUL"),
    ("pause_instance", (LONE,), {}, "instance_key contains a lone surrogate"),
    ("get_instances", (), {"offset": 2**63 - 1}, "offset must be an integer"),
    ("get_queues", ("",), {}, "names must be a list of queue names"),
    ("work_handlers", ([None],), {}, "queue name must be"),
    (
        "flow",
        ([{"ref": "a", "name": "q"}, {"ref": "b", "name": "q", "depends_on": [["a"]]}],),
        {},
        "a list of refs",
    ),
    ("work_handlers", ("q",), {}, "queues must be a list of queue names"),
    ("redrive", ("q",), {"data": {"k": "\x00"}}, "data contains a NUL"),
    ("update", ("q", {}), {"singleton_key": LONE}, "singleton_key contains a lone"),
    ("update", ("q", {}), {"singleton_key": "k\x00"}, "singleton_key contains a NUL"),
]


@pytest.mark.parametrize(
    ("verb", "args", "options", "says"), UNSTORABLE, ids=[f"{c[0]}-{c[3][:20]}" for c in UNSTORABLE]
)
async def test_values_the_database_would_refuse_are_validation_errors(
    boss: Boss, verb: str, args: tuple[Any, ...], options: dict[str, Any], says: str
) -> None:
    before = await _totals(boss)
    with pytest.raises(ValidationError, match=says):
        await getattr(boss, verb)(*args, **options)
    assert await _totals(boss) == before


async def test_retry_at_the_largest_retry_limit_does_not_overflow(boss: Boss) -> None:
    """A failed job whose retry_limit is the largest an integer column holds is retried
    without adding one to it (once: 22003, integer out of range)."""
    job_id = await boss.send("q", {}, retry_limit=2**31 - 1)
    assert job_id is not None
    await boss.db.execute(
        f"UPDATE {SCHEMA}.job SET state = 'failed', completed_on = now() WHERE id = $1",
        [job_id],
    )
    result = await boss.retry("q", job_id)
    assert result.affected == 1
    job = await boss.get_job_by_id("q", job_id)
    assert job is not None and job.retry_limit == 2**31 - 1 and job.state == "retry"


async def test_a_redrive_a_policy_refuses_is_a_validation_error(boss: Boss) -> None:
    """Dead letters without a singleton key redriven into a key_strict_fifo queue: the
    queue's rule refuses them; nothing moves."""
    await boss.create_queue("fifo", policy="key_strict_fifo")
    await boss.create_queue("dlq")
    await boss.send("dlq", {"n": 1})
    before = await _totals(boss)
    with pytest.raises(ValidationError, match="key_strict_fifo"):
        await boss.redrive("dlq", destination="fifo")
    assert await _totals(boss) == before
    assert [j.data for j in await boss.find_jobs("dlq")] == [{"n": 1}]


async def test_a_flow_job_without_a_key_for_a_strict_fifo_queue_is_refused_first(
    boss: Boss,
) -> None:
    """A flow whose child goes to a key_strict_fifo queue without a singleton key: the
    same ValidationError as send's, before anything is written (it reached the queue's
    CHECK constraint as a DatabaseError; found by the property test)."""
    await boss.create_queue("fifo", policy="key_strict_fifo")
    before = await _totals(boss)
    flow: list[dict[str, Any]] = [
        {"ref": "a", "name": "q"},
        {"ref": "b", "name": "fifo", "depends_on": ["a"]},
    ]
    with pytest.raises(ValidationError, match="key_strict_fifo policy"):
        await boss.flow(flow)
    with pytest.raises(ValidationError, match="key_strict_fifo policy"):
        await boss.send("fifo", {"n": 1})
    assert await _totals(boss) == before
    flow[1]["options"] = {"singleton_key": "k"}
    assert set(await boss.flow(flow)) == {"a", "b"}


async def test_an_error_is_stored_whatever_its_message_holds(boss: Boss) -> None:
    """A failure's message the database could not hold (a lone surrogate, a NUL) is
    stored with those characters escaped, not replaced by a stand-in."""
    [job] = await boss.fetch("q")
    await boss.fail("q", job, RuntimeError(f"cannot open {LONE} \x00"))
    stored = await boss.get_job_by_id("q", job.id)
    assert stored is not None and stored.output is not None
    assert stored.output["message"] == "cannot open caf\\udce9 \\x00"


def test_constructor_values_the_server_would_refuse_are_refused_at_once() -> None:
    with pytest.raises(ConfigError, match="connection_timeout"):
        Boss("postgresql://localhost/x", connection_timeout=float("nan"))
    with pytest.raises(ValidationError, match="pg_"):
        Boss("postgresql://localhost/x", schema="pg_catalog")
