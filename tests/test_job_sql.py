"""The job and queue statement builders and the option validation, without a database:
what each backend's statements may contain (checked by the capability guard's
parser), how parameters are named, and the messages bad options get."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
import pickle
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from qcore import backends
from qcore.conformance.guard import features_used, violations
from qcore.errors import ValidationError
from qcore.identifiers import quote
from qcore.job import Job, JobState, Queue
from qcore.options import (
    ids_and_fences,
    job_record,
    normalize_output,
    queue_name,
    queue_options,
    queue_options_json,
    records_json,
)
from qcore.sql import jobs as sql
from qcore.sql import queues as queue_sql
from qcore.sql._statement import Params, Statement
from qcore.sql.jobs import FetchSpec

pytestmark = pytest.mark.feature("lifecycle")

Q = quote("pgboss")


def _job_statements(skip_locked: bool, split: bool) -> dict[str, Statement]:
    built = {
        "insert": sql.insert_jobs(Q),
        "insert_checked": sql.insert_jobs(Q, check_dead_letters=True, next_slot=True),
        "insert_unchecked": sql.insert_jobs(Q, drop_conflicts=False),
        "send": sql.send_job(Q),
        "send_next_slot": sql.send_job(Q, next_slot=True, drop_conflicts=False),
        "fetch": sql.fetch_jobs(Q, skip_locked=skip_locked),
        "fetch_strict_fifo": sql.fetch_jobs(Q, skip_locked=skip_locked, policy="key_strict_fifo"),
        "fetch_one_per_key": sql.fetch_jobs(Q, skip_locked=skip_locked, policy="stately"),
        "fetch_all_options": sql.fetch_jobs(
            Q,
            skip_locked=skip_locked,
            spec=FetchSpec(
                priority=False,
                order_by_created_on=False,
                ignore_start_after=True,
                min_priority=1,
                max_priority=2,
                include_metadata=True,
            ),
        ),
        "complete": sql.complete_jobs(Q, fenced=True, include_queued=True),
        "cancel": sql.cancel_jobs(Q, fenced=True),
        "resume": sql.resume_jobs(Q),
        "retry": sql.retry_jobs(Q),
        "delete": sql.delete_jobs(Q, fenced=True),
        "touch": sql.touch_jobs(Q, fenced=True),
        "get": sql.get_job(Q),
        "find": sql.find_jobs(Q, by_id=True, by_key=True, by_data=True, queued=True),
    }
    if split:
        built["fail_remove"] = sql.fail_remove(Q, fenced=True)
        built["fail_retry"] = sql.fail_reinsert_retry(Q)
        built["fail_failed"] = sql.fail_reinsert_failed(Q)
    else:
        built["fail"] = sql.fail_jobs(Q, fenced=True)
    return built


def _queue_statements() -> dict[str, Statement]:
    return {
        "create": queue_sql.call_create_queue(Q),
        "delete": queue_sql.call_delete_queue(Q),
        "get": queue_sql.get_queues(Q, by_name=True),
        "live": queue_sql.get_queues_live(Q, by_name=True),
        "live_all": queue_sql.get_queues_live(Q),
        "names": queue_sql.queue_names(Q),
        "update": queue_sql.update_queue(Q, ("retry_limit", "dead_letter", "notify")),
        "refs": queue_sql.dead_letter_references(Q),
        "batch": queue_sql.delete_jobs_batch(Q, "stored"),
        "reduce": queue_sql.reduce_cached_counts(Q),
        "zero": queue_sql.zero_cached_counts(Q),
        "blocked": queue_sql.select_blocked_keys(Q),
        "bam": queue_sql.delete_unfinished_bam(Q),
        "exists": queue_sql.table_exists(Q),
    }


def test_cockroachdb_statements_pass_the_guard() -> None:
    crdb = backends.get("cockroachdb")
    for name, statement in {**_job_statements(False, True), **_queue_statements()}.items():
        assert violations(statement.sql, crdb) == [], name


def test_postgres_fail_is_one_multi_mutation_statement() -> None:
    """Why the split path exists: the one-statement fail modifies the job table three
    times, which CockroachDB refuses."""
    fail = sql.fail_jobs(Q).sql
    assert "multi_mutation_cte" in features_used(fail)
    assert violations(fail, backends.get("postgres")) == []
    assert "multi_mutation_cte" in violations(fail, backends.get("cockroachdb"))


def test_fetch_strategies() -> None:
    locked = sql.fetch_jobs(Q, skip_locked=True).sql
    atomic = sql.fetch_jobs(Q, skip_locked=False).sql
    assert "skip_locked" in features_used(locked)
    assert "skip_locked" not in features_used(atomic)
    assert "j.state = c.state" in atomic.split("claimed AS")[1]  # the recheck
    assert "candidates AS MATERIALIZED" in atomic and "candidates AS MATERIALIZED" not in locked
    assert "FOR UPDATE" not in atomic


def test_notify_only_when_asked() -> None:
    for build in (sql.insert_jobs, sql.send_job):
        assert "listen_notify" in features_used(build(Q, notify=True).sql)
        assert "listen_notify" not in features_used(build(Q).sql)


def test_parameters_are_named_and_numbered() -> None:
    statement = sql.complete_jobs(Q, fenced=True)
    assert statement.params == ("queue", "ids", "plain_ids", "fence_ids", "fence_counts", "output")
    fences: dict[str, list[object]] = {"plain_ids": [], "fence_ids": [], "fence_counts": []}
    values = statement.bind(queue="q", ids=[], **fences, output=None, extra=1)
    assert values == ["q", [], [], [], [], None]
    with pytest.raises(TypeError, match="output"):
        statement.bind(queue="q", ids=[], **fences)
    p = Params()
    assert (p("a"), p("b"), p("a")) == ("$1", "$2", "$1")
    unfenced = sql.complete_jobs(Q)
    assert unfenced.params == ("queue", "ids", "output")
    assert "$4" not in unfenced.sql


def test_builders_are_pure_and_cached() -> None:
    assert sql.fetch_jobs(Q, skip_locked=True) is sql.fetch_jobs(Q, skip_locked=True)
    other = quote("Other Schema")
    assert '"Other Schema".job' in sql.fetch_jobs(other, skip_locked=True).sql
    for builder in (sql, queue_sql):
        for name, fn in inspect.getmembers(builder, inspect.isfunction):
            if fn.__module__ == builder.__name__ and not name.startswith("_"):
                assert fn.__doc__, f"{builder.__name__}.{name} needs its one-line comment"


def test_job_columns_match_the_reference_order() -> None:
    assert sql.JOB_COLUMNS[:5] == ("id", "name", "priority", "data", "state")
    assert sql.JOB_COLUMNS[-1] == "upsert_by_key" and len(sql.JOB_COLUMNS) == 37
    assert "upsert_by_key" not in sql.REINSERT_COLUMNS


# --------------------------------------------------------------------------- values


def test_job_state_order() -> None:
    assert [s.value for s in JobState] == [
        "created",
        "retry",
        "active",
        "completed",
        "cancelled",
        "failed",
    ]
    assert JobState.RETRY.queued and not JobState.ACTIVE.queued and JobState.FAILED.finished
    assert JobState.CREATED.rank < JobState.RETRY.rank < JobState.ACTIVE.rank


def test_job_and_queue_from_rows() -> None:
    job = Job.from_row(
        {
            "id": uuid.uuid4(),
            "name": "q",
            "data": None,
            "retry_count": 0,
            "expire_seconds": 9,
            "state": "retry",
            "queue": "q",
        }
    )
    assert job.expire_in_seconds == 9 and job.state is JobState.RETRY
    # the fast path builds what the constructor builds: equal, frozen, every field set
    built = Job(
        id=job.id, name="q", data=None, retry_count=0, expire_in_seconds=9, state=JobState.RETRY
    )
    assert job == built and repr(job) == repr(built) and hash(job.id) == hash(built.id)
    assert job.priority is None and not job.cancelled.is_set()
    with pytest.raises(AttributeError):
        job.retry_count = 1  # type: ignore[misc]
    with pytest.raises(TypeError, match="retry_count"):
        Job.from_row({"id": job.id, "name": "q", "data": None, "expire_seconds": 9})
    now = dt.datetime.now(dt.timezone.utc)
    queue = Queue.from_row(
        {name: None for name in queue_sql.QUEUE_COLUMNS}
        | {
            "name": "q",
            "expire_seconds": 5,
            "deletion_seconds": 6,
            "warning_queued": 7,
            "created_on": now,
            "updated_on": now,
        }
    )
    assert (queue.expire_in_seconds, queue.delete_after_seconds, queue.warning_queue_size) == (
        5,
        6,
        7,
    )


def test_a_claims_jobs_read_every_field_the_constructor_sets() -> None:
    """from_rows leaves the defaults to the class: each job still reads every field as
    the constructor sets it, compares, copies and pickles as one built by it."""
    rows: list[dict[str, Any]] = [
        {
            "id": uuid.uuid4(),
            "name": "q",
            "priority": 3,
            "data_text": json.dumps({"n": n}),
            "retry_count": 0,
            "expire_seconds": 9,
            "queue_notify": True,
        }
        for n in range(3)
    ]
    jobs = Job.from_rows(rows)
    for n, (job, row) in enumerate(zip(jobs, rows, strict=True)):
        built = Job(
            id=row["id"], name="q", priority=3, data={"n": n}, retry_count=0, expire_in_seconds=9
        )
        for f in dataclasses.fields(Job):
            assert getattr(job, f.name) == getattr(built, f.name), f.name
        assert job == built and repr(job) == repr(built)
        assert pickle.loads(pickle.dumps(job)) == built
        assert dataclasses.replace(job, priority=1) == dataclasses.replace(built, priority=1)
        assert not job.cancelled.is_set()
    assert jobs[0].cancelled is not jobs[1].cancelled  # each job its own event


# --------------------------------------------------------------------------- validation


def _encoded(*data: Any, numbered: bool = False) -> str:
    return records_json([job_record(d) for d in data], numbered=numbered)


def test_records_json_is_one_compact_array() -> None:
    text = records_json([job_record("back\\u0000slash"), job_record([1.5])], numbered=True)
    decoded = json.loads(text)
    assert [r["data"] for r in decoded] == ["back\\u0000slash", [1.5]]  # no NUL: not refused
    assert ", " not in text and ": " not in text


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: queue_name("a b"), "contains ' '"),
        (lambda: queue_name("é"), "ASCII"),
        (lambda: queue_name(5), "must be a string"),
        (lambda: queue_name("x" * 256), "limit is 255"),
        (lambda: queue_options("q", {"policy": "lifo"}), "standard, short, singleton"),
        (lambda: queue_options("q", {"retry_limit": -1}), ">= 0"),
        (lambda: queue_options("q", {"retry_delay": 1.5}), "integer"),
        (lambda: queue_options("q", {"expire_in_seconds": 86_401}), "from 1 to 86400"),
        (lambda: queue_options("q", {"heartbeat_seconds": 9}), ">= 10"),
        (lambda: queue_options("q", {"retention_seconds": 0}), ">= 1"),
        (lambda: queue_options("q", {"delete_after_seconds": -1}), "0 keeps"),
        (lambda: queue_options("q", {"retry_delay_max": 3}), "retry_backoff=True"),
        (lambda: queue_options("q", {"notify": 1}), "True or False"),
        (lambda: queue_options("q", {"dead_letter": "q"}), "own dead letter"),
        (lambda: queue_options("q", {"colour": "red"}), "unknown queue option colour"),
        (lambda: _encoded(float("inf")), "^data must be JSON-serialisable.*NaN or Infinity"),
        (lambda: _encoded({"t": dt.datetime.now()}), "JSON-serialisable"),
        (lambda: _encoded("a\x00b"), "^data contains a NUL"),
        (lambda: _encoded(1, {"k": {1, 2}}, numbered=True), r"^jobs\[1\]: data must be JSON"),
        (lambda: job_record(None, priority=True), "priority"),
        (lambda: job_record(None, start_after=float("nan")), "start_after"),
        (lambda: job_record(None, id="nope"), "UUID"),
        (lambda: job_record(None, singleton_key=""), "non-empty"),
        (lambda: job_record(None, colour="red"), "unknown job option colour"),
        (lambda: ids_and_fences(42), "UUID"),
        (lambda: ids_and_fences({"id": 1}), "UUID"),
    ],
)
def test_validation_messages(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        call()


def test_queue_options_json_uses_pg_boss_keys() -> None:
    given = queue_options(
        "q",
        {
            "policy": "stately",
            "retry_backoff": True,
            "retry_delay_max": 9,
            "expire_in_seconds": 60,
            "delete_after_seconds": 0,
            "warning_queue_size": 5,
            "dead_letter": "dlq",
            "retry_limit": None,
        },
    )
    assert queue_options_json(given) == {
        "policy": "stately",
        "retryBackoff": True,
        "retryDelayMax": 9,
        "expireInSeconds": 60,
        "deleteAfterSeconds": 0,
        "warningQueueSize": 5,
        "deadLetter": "dlq",
    }
    cleared = queue_options("q", {"dead_letter": None, "heartbeat_seconds": None}, update=True)
    assert cleared == {"dead_letter": None, "heartbeat_seconds": None}


def test_job_record() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    record = job_record(
        {"a": [1]},
        priority=-3,
        start_after=when,
        retry_backoff=True,
        retry_delay_max=4,
        group_id="g",
    )
    assert record["data"] == {"a": [1]} and record["priority"] == -3
    assert record["start_after"] == when.isoformat() and record["retry_delay_max"] == 4
    assert "id" not in record  # the server makes it
    given = uuid.uuid4()
    assert job_record(None, id=given)["id"] == str(given)
    immediate = job_record(None, start_after=0)
    assert "start_after" not in immediate and "start_after_seconds" not in immediate
    assert job_record(None, start_after=dt.timedelta(seconds=90))["start_after_seconds"] == 90


def test_output_normalisation() -> None:
    assert normalize_output(None) is None
    assert normalize_output({"a": 1}) == {"a": 1}
    assert normalize_output([1]) == {"value": [1]}
    assert normalize_output("x") == {"value": "x"}
    error = normalize_output(ValueError("bad"))
    assert error["name"] == "ValueError" and error["message"] == "bad"
    with pytest.raises(ValidationError):
        normalize_output({"v": float("nan")})


def test_ids_and_fences() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    job = Job(id=b, name="q", data=None, retry_count=2, expire_in_seconds=1)
    every, plain, fences = ids_and_fences([str(a), a, job])
    assert every == [a, b] and plain == [a, a] and fences == [(b, 2)]
    assert ids_and_fences(a) == ([a], [a], [])
