"""``SyncBoss``: the blocking facade, from plain threads, on the local PostgreSQL.

No asyncio here: every test is a plain ``def``, as the code using ``SyncBoss`` is.
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg2
import psycopg2.extensions
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from qcore import Boss, Job, JobState, SyncBoss
from qcore.errors import (
    ConfigError,
    DatabaseError,
    NotStartedError,
    QcoreError,
    QueueNotFoundError,
    ValidationError,
)
from qcore.identifiers import quote
from tests.conftest import admin_execute

pytestmark = [pytest.mark.postgres, pytest.mark.feature("sync")]


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = f"qcore_sync_{uuid.uuid4().hex[:10]}"
    yield name
    admin_execute(f"DROP SCHEMA IF EXISTS {quote(name)} CASCADE", pg_dsn)


@pytest.fixture
def boss(pg_dsn: str, schema: str) -> Iterator[SyncBoss]:
    with SyncBoss(pg_dsn, schema=schema) as instance:
        instance.create_queue("mail", retry_limit=1)
        yield instance


@pytest.fixture
def table(pg_dsn: str) -> Iterator[str]:
    """A table of the caller's own, written in the same transaction as a job."""
    name = f"orders_{uuid.uuid4().hex[:8]}"
    admin_execute(f"CREATE TABLE {name} (id int PRIMARY KEY)", pg_dsn)
    yield name
    admin_execute(f"DROP TABLE IF EXISTS {name}", pg_dsn)


def rows(pg_dsn: str, table: str) -> int:
    [(count,)] = admin_execute(f"SELECT count(*) FROM {table}", pg_dsn)
    assert isinstance(count, int)
    return count


def test_round_trip(boss: SyncBoss) -> None:
    assert boss.started and boss.is_installed() and boss.schema_version() == 46
    job_id = boss.send("mail", {"to": "a@example.com"}, priority=2)
    assert isinstance(job_id, uuid.UUID)
    [job] = boss.fetch("mail", batch_size=5)
    assert job.id == job_id and job.data == {"to": "a@example.com"}
    assert boss.complete("mail", job.id, {"sent": True}).affected == 1
    stored = boss.get_job_by_id("mail", job_id)
    assert stored is not None and stored.state is JobState.COMPLETED
    assert stored.output == {"sent": True}
    assert boss.insert("mail", [{"data": {"n": n}} for n in range(3)]) is not None
    assert len(boss.fetch("mail", batch_size=10)) == 3


# --------------------------------------------------------------------------- db=


@pytest.fixture
def psycopg2_conn(pg_dsn: str) -> Iterator[psycopg2.extensions.connection]:
    conn = psycopg2.connect(pg_dsn)
    yield conn
    conn.close()


@pytest.fixture(params=["psycopg2", "psycopg"])
def sync_conn(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[Any]:
    """A caller's blocking connection: psycopg2's, or psycopg 3's (what Django 4.2+ holds)."""
    conn: Any = psycopg2.connect(pg_dsn) if request.param == "psycopg2" else psycopg.connect(pg_dsn)
    yield conn
    conn.close()


def test_a_send_joins_the_callers_transaction(
    boss: SyncBoss, sync_conn: Any, pg_dsn: str, table: str
) -> None:
    conn = sync_conn
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1)")
    dropped = boss.send("mail", {"order": 1}, db=conn)
    assert dropped is not None
    assert boss.get_job_by_id("mail", dropped) is None  # not visible before the commit
    conn.rollback()
    assert boss.get_job_by_id("mail", dropped) is None and rows(pg_dsn, table) == 0
    assert boss.fetch("mail") == []

    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (2)")
    kept = boss.send("mail", {"order": 2}, db=conn)
    conn.commit()
    assert rows(pg_dsn, table) == 1
    [job] = boss.fetch("mail")
    assert job.id == kept


def test_an_autocommit_connection_commits_the_call(boss: SyncBoss, sync_conn: Any) -> None:
    sync_conn.autocommit = True
    job_id = boss.send("mail", {}, db=sync_conn)
    assert [j.id for j in boss.fetch("mail")] == [job_id]


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_sqlalchemy_session_send_joins_the_callers_transaction(
    boss: SyncBoss, pg_dsn: str, table: str, driver: str
) -> None:
    engine = create_engine(pg_dsn.replace("postgresql://", f"postgresql+{driver}://", 1))
    try:
        with Session(engine) as session:
            session.execute(text(f"INSERT INTO {table} VALUES (1)"))
            dropped = boss.send("mail", {"order": 1}, db=session)
            session.rollback()
            assert dropped is not None and boss.get_job_by_id("mail", dropped) is None
            assert rows(pg_dsn, table) == 0

            session.execute(text(f"INSERT INTO {table} VALUES (2)"))
            kept = boss.send("mail", {"order": 2}, db=session)
            assert kept is not None
            assert boss.get_job_by_id("mail", kept) is None  # not yet committed
            session.commit()
        assert rows(pg_dsn, table) == 1
        [job] = boss.fetch("mail")
        assert job.id == kept
    finally:
        engine.dispose()


def test_a_failed_call_leaves_the_callers_transaction_usable(
    boss: SyncBoss,
    sync_conn: Any,
    pg_dsn: str,
    table: str,
    schema: str,
) -> None:
    # a trigger makes the server itself refuse one job: an error inside the transaction
    admin_execute(
        f"CREATE FUNCTION {quote(schema)}.refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;"
        f" CREATE TRIGGER refuse BEFORE INSERT ON {quote(schema)}.job FOR EACH ROW"
        f" WHEN (NEW.data ? 'refuse') EXECUTE FUNCTION {quote(schema)}.refuse()",
        pg_dsn,
    )
    conn = sync_conn
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (1)")
    with pytest.raises(DatabaseError, match="refused by the test"):
        boss.send("mail", {"refuse": True}, db=conn)
    with pytest.raises(QueueNotFoundError):
        boss.send("nowhere", {}, db=conn)
    kept = boss.send("mail", {"ok": True}, db=conn)  # qcore's failed part alone was undone
    conn.commit()
    assert rows(pg_dsn, table) == 1
    assert [j.id for j in boss.fetch("mail")] == [kept]


def test_a_connection_it_cannot_use_is_refused(boss: SyncBoss) -> None:
    with pytest.raises(ConfigError, match="cannot use"):
        boss.send("mail", {}, db=object())


# --------------------------------------------------------------------------- errors


def test_errors_are_the_qcore_exceptions(boss: SyncBoss) -> None:
    with pytest.raises(QueueNotFoundError):
        boss.send("nowhere", {})
    with pytest.raises(ValidationError):
        boss.create_queue("bad name!")
    with pytest.raises(ValidationError):
        boss.send("mail", {"x": float("nan")})
    with pytest.raises(ConfigError):
        boss.start(attempts=0)
    assert boss.fetch("mail", batch_size=10) == []


def loop_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("qcore-sync-")}


def test_bad_options_fail_before_a_thread_starts() -> None:
    before = loop_threads()
    with pytest.raises(ConfigError):
        SyncBoss()  # the postgres backend needs a connection
    with pytest.raises(ConfigError):
        SyncBoss("postgresql://x@localhost/x", max=0)
    assert loop_threads() == before


def test_stop_then_start_again_then_close(pg_dsn: str, schema: str) -> None:
    boss = SyncBoss(pg_dsn, schema=schema)
    with pytest.raises(NotStartedError):
        boss.send("mail", {})  # not started yet
    boss.start()
    boss.create_queue("mail")
    boss.stop()
    assert not boss.started
    with pytest.raises(NotStartedError):
        boss.send("mail", {})
    boss.start()  # the same loop thread serves a restart
    assert boss.send("mail", {}) is not None
    thread = boss._thread
    boss.close()
    assert boss.closed and not thread.is_alive()
    with pytest.raises(NotStartedError, match="closed"):
        boss.send("mail", {})
    with pytest.raises(NotStartedError, match="closed"):
        boss.start()
    boss.close()  # again: nothing happens


def test_leaving_the_with_block_closes(pg_dsn: str, schema: str) -> None:
    with SyncBoss(pg_dsn, schema=schema) as boss:
        thread = boss._thread
        boss.create_queue("mail")
    assert boss.closed and not thread.is_alive()
    with pytest.raises(NotStartedError):
        boss.fetch("mail")


def test_a_failed_start_in_with_leaves_no_thread() -> None:
    before = loop_threads()
    with (
        pytest.raises(DatabaseError),
        SyncBoss("postgresql://nobody@127.0.0.1:1/none", connection_timeout=2),
    ):
        pass  # pragma: no cover
    assert loop_threads() == before


def test_calling_from_the_loop_thread_raises(boss: SyncBoss) -> None:
    caught: list[BaseException] = []

    def on_stopped(_: Any) -> None:  # callbacks run on the loop thread
        for call in (boss.get_queues, boss.close, lambda: boss.stop(close=True)):
            try:
                call()
            except QcoreError as exc:
                caught.append(exc)

    boss.on("stopped", on_stopped)
    boss.stop(close=False)
    assert len(caught) == 3
    for error in caught:
        assert "own event loop thread" in str(error) and "boss.boss" in str(error)
    assert not boss.closed
    assert boss.get_queue("mail") is not None  # the loop still serves other threads


def test_threads_share_one_instance(boss: SyncBoss) -> None:
    ids: list[uuid.UUID | None] = []

    def send_many(n: int) -> None:
        for i in range(10):
            ids.append(boss.send("mail", {"thread": n, "i": i}))

    threads = [threading.Thread(target=send_many, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 80 and None not in ids
    assert len(boss.fetch("mail", batch_size=100)) == 80


def test_every_boss_verb_has_a_blocking_twin() -> None:
    verbs = {
        name
        for name, member in inspect.getmembers(Boss, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }
    assert verbs <= set(dir(SyncBoss))
    others = {
        name
        for name, member in inspect.getmembers(Boss)
        if not name.startswith("_") and name not in verbs and callable(member)
    }
    assert others - {"context"} <= set(dir(SyncBoss))  # a context is the async Boss's own
    for name in verbs - {"start"}:  # start returns the SyncBoss, not the Boss
        twin = getattr(SyncBoss, name)
        assert not inspect.iscoroutinefunction(twin)
        assert twin.__doc__ == getattr(Boss, name).__doc__
        assert inspect.signature(twin) == inspect.signature(getattr(Boss, name))


# --------------------------------------------------------------------------- work


def wait_for(condition: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_work_runs_a_plain_function_in_a_thread(boss: SyncBoss) -> None:
    seen: list[tuple[Any, str]] = []

    def handler(jobs: list[Job]) -> dict[str, int]:
        # a plain function: runs in a worker thread, may block and may call the SyncBoss
        for job in jobs:
            seen.append((job.data["n"], threading.current_thread().name))
        boss.get_queue("mail")
        return {"done": len(jobs)}

    worker = boss.work("mail", handler, polling_interval_seconds=0.5)
    assert [status.id for status in boss.worker_statuses()] == [worker]
    ids = [boss.send("mail", {"n": n}) for n in range(5)]
    wait_for(lambda: len(seen) == 5)
    assert sorted(n for n, _ in seen) == list(range(5))
    assert not any(name.startswith("qcore-sync") for _, name in seen)  # not the loop thread
    wait_for(
        lambda: all(
            (job := boss.get_job_by_id("mail", i)) is not None and job.state is JobState.COMPLETED
            for i in ids
            if i is not None
        )
    )
    boss.off_work("mail")
    assert boss.worker_statuses() == []


# --------------------------------------------------------------------------- interrupts


class Interrupted(Exception):
    """What the test's signal handler raises in the waiting thread (as Ctrl-C would)."""


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_an_interrupted_call_is_undone_before_the_caller_goes_on(
    boss: SyncBoss, psycopg2_conn: psycopg2.extensions.connection, pg_dsn: str, schema: str
) -> None:
    blocker = psycopg2.connect(pg_dsn)  # holds the job table so the send waits on it
    blocker.cursor().execute(f"LOCK TABLE {quote(schema)}.job IN ACCESS EXCLUSIVE MODE")
    released: list[float] = []

    def release_the_table() -> None:
        released.append(time.monotonic())  # before the commit that lets the send go on
        blocker.commit()

    release = threading.Timer(0.6, release_the_table)

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    release.start()
    try:
        with pytest.raises(Interrupted):
            boss.send("mail", {"interrupted": True}, db=psycopg2_conn)
        returned = time.monotonic()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.join()
        blocker.close()
    # interrupted at 0.2 s, the call returned only after the table was released and its
    # statement and SAVEPOINT undone, not at the interrupt
    assert released and returned > released[0]
    psycopg2_conn.commit()  # the caller's connection is usable and in no failed state
    assert boss.find_jobs("mail") == []


def test_locked_fetch_blocks_and_settles_on_leaving(boss: SyncBoss) -> None:
    sent: list[uuid.UUID] = []
    for n in range(3):
        job_id = boss.send("mail", {"n": n})
        assert job_id is not None
        sent.append(job_id)
    with boss.locked_fetch("mail", batch_size=2) as batch:
        assert [j.id for j in batch.jobs] == sent[:2]
        assert boss.fetch("mail", batch_size=5)[0].id == sent[2]  # the rest, from the pool
        assert batch.fail(batch.jobs[:1], "no").affected == 1
        assert [j.id for j in batch.unsettled] == [sent[1]]
    states = [boss.get_job_by_id("mail", i) for i in sent[:2]]
    assert [s.state if s else None for s in states] == [JobState.RETRY, JobState.COMPLETED]
    boss.complete("mail", sent[2])
    with pytest.raises(RuntimeError, match="broke"), boss.locked_fetch("mail") as batch:
        [again] = batch.jobs
        assert again.id == sent[0] and again.retry_count == 1
        raise RuntimeError("broke")
    failed = boss.get_job_by_id("mail", sent[0])
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.output is not None and failed.output["message"] == "broke"
