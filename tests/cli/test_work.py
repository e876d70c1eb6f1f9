"""``qcore work``, end to end in a subprocess: it loads an application's Boss, works its
registered handlers, stops gracefully on SIGTERM (a slow handler's job completes), at
once on a second SIGINT (the job is failed, to be retried), and exits with a status a
process supervisor reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from qcore import SyncBoss
from qcore.job import JobState
from tests.cli import run_qcore
from tests.conftest import admin_execute
from tests.outage import SilentRelay

pytestmark = [pytest.mark.feature("workers"), pytest.mark.postgres]

APP = textwrap.dedent(
    """
    import asyncio, os
    from pathlib import Path
    from qcore import Boss

    boss = Boss(os.environ["APP_DSN"], schema=os.environ["APP_SCHEMA"], supervise=False)

    @boss.handler("fast", batch_size=5)
    async def fast(jobs):
        return None

    @boss.handler("slow")
    async def slow(jobs):
        Path(os.environ["APP_MARK"]).write_text("started")
        await asyncio.sleep(float(os.environ["APP_SLOW_SECONDS"]))
        return {"slept": True}
    """
)


def _until(check: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what}")
        time.sleep(0.1)


@pytest.fixture
def app(pg_dsn: str, tmp_path: Path) -> Iterator[tuple[SyncBoss, dict[str, str]]]:
    schema = f"qcore_cli_work_{os.getpid()}"
    (tmp_path / "workapp.py").write_text(APP)
    env = {
        **os.environ,
        "APP_DSN": pg_dsn,
        "APP_SCHEMA": schema,
        "APP_MARK": str(tmp_path / "slow-started"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PYTHONPATH", None)
    with SyncBoss(pg_dsn, schema=schema, supervise=False) as boss:
        boss.create_queue("fast")
        boss.create_queue("slow")
        try:
            yield boss, {**env, "APP_CWD": str(tmp_path)}
        finally:
            admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE", pg_dsn)


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "qcore", "work", "workapp:boss", *args],
        cwd=env["APP_CWD"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _state(boss: SyncBoss, queue: str, job_id: Any) -> JobState | None:
    job = boss.get_job_by_id(queue, job_id)
    return job.state if job else None


def test_sigterm_lets_a_slow_handler_finish_and_exits_0(
    app: tuple[SyncBoss, dict[str, str]],
) -> None:
    boss, env = app
    fast = [boss.send("fast", {"n": n}) for n in range(12)]
    slow = boss.send("slow", {})
    proc = _start({**env, "APP_SLOW_SECONDS": "3"}, "--concurrency", "2", "--stop-timeout", "60")
    try:
        _until(
            lambda: all(_state(boss, "fast", i) is JobState.COMPLETED for i in fast),
            what="the fast jobs completed",
        )
        _until(lambda: Path(env["APP_MARK"]).exists(), what="the slow handler started")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert _state(boss, "slow", slow) is JobState.COMPLETED
    assert "qcore work: pid" in out and "queues fast, slow" in out  # the banner
    assert "stopping gracefully" in out and "Traceback" not in out


def test_a_second_signal_stops_at_once(app: tuple[SyncBoss, dict[str, str]]) -> None:
    boss, env = app
    slow = boss.send("slow", {})
    proc = _start({**env, "APP_SLOW_SECONDS": "600"}, "--queues", "slow")
    try:
        _until(lambda: Path(env["APP_MARK"]).exists(), what="the slow handler started")
        proc.send_signal(signal.SIGINT)  # graceful: would wait up to 30 s for the handler
        time.sleep(0.5)  # (not a margin: the second signal stops it at once either way)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert _state(boss, "slow", slow) in (JobState.RETRY, JobState.FAILED)


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("workapp:nothing", "has no attribute 'nothing'"),
        ("no_such_module_here:boss", "cannot import 'no_such_module_here'"),
        ("workapp:Path", "not a qcore Boss"),
    ],
)
def test_a_target_that_is_not_a_boss_is_a_usage_error(
    app: tuple[SyncBoss, dict[str, str]], target: str, said: str
) -> None:
    _, env = app
    done = subprocess.run(
        [sys.executable, "-m", "qcore", "work", target],
        cwd=env["APP_CWD"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_queue_is_a_usage_error(app: tuple[SyncBoss, dict[str, str]]) -> None:
    _, env = app
    proc = _start({**env, "APP_SLOW_SECONDS": "1"}, "--queues", "nope")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no handler is registered for nope" in out, out


def test_a_stop_while_the_database_is_silent_is_bounded_and_says_so(
    app: tuple[SyncBoss, dict[str, str]], pg_dsn: str
) -> None:
    """The database stops answering (its host gone silent: no refusal, every read
    waits) while a handler runs, then SIGTERM: the handler finishes, its outcome
    cannot be stored; the stop ends within the stop timeout and a short last try, not
    a connection timeout per try (or never), exits 75 and names the job, which stays
    active to expire and retry."""
    boss, env = app
    slow = boss.send("slow", {})
    with SilentRelay(pg_dsn) as relay:
        relayed = {**env, "APP_DSN": relay.url(pg_dsn), "APP_SLOW_SECONDS": "3"}
        proc = _start(relayed, "--queues", "slow", "--stop-timeout", "5")
        try:
            _until(lambda: Path(env["APP_MARK"]).exists(), what="the slow handler started")
            relay.silence()
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            out, _ = proc.communicate(timeout=120)
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 75, out
    assert f"slow/{slow}" in out and "unsettled" in out, out
    # bounded: 5 s of stop timeout and a 2 s last try, with room for a busy machine; a
    # connection timeout per settle try would take 30 s more
    assert took < 30, (took, out)
    assert _state(boss, "slow", slow) is JobState.ACTIVE


FAILING_APP = textwrap.dedent(
    """
    import os
    from qcore import Boss

    boss = Boss(os.environ["APP_DSN"], schema=os.environ["APP_SCHEMA"], supervise=False)

    @boss.handler("fast", polling_interval_seconds=0.5)
    async def broken(jobs):
        raise ValueError("the payload has no 'to' field")
    """
)

GHOST_APP = textwrap.dedent(
    """
    import os
    from qcore import Boss

    boss = Boss(os.environ["APP_DSN"], schema=os.environ["APP_SCHEMA"], supervise=False)

    @boss.handler("fast")
    async def fast(jobs):
        return None

    @boss.handler("ghost")
    async def ghost(jobs):
        return None

    @boss.handler("phantom")
    async def phantom(jobs):
        return None
    """
)

TYPO_APP = textwrap.dedent(
    """
    from qcore import Boss

    boss = Boss("postgress://app:s3cret-pw@127.0.0.1:5432/app")

    @boss.handler("fast")
    async def fast(jobs):
        return None
    """
)


def _run_app(env: dict[str, str], module: str, source: str) -> subprocess.CompletedProcess[str]:
    Path(env["APP_CWD"], f"{module}.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "qcore", "work", f"{module}:boss"],
        cwd=env["APP_CWD"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_failing_handler_is_in_the_log(app: tuple[SyncBoss, dict[str, str]]) -> None:
    boss, env = app
    job_id = boss.send("fast", {}, retry_limit=1, retry_delay=0)
    Path(env["APP_CWD"], "failapp.py").write_text(FAILING_APP)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qcore", "work", "failapp:boss"],
        cwd=env["APP_CWD"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _until(lambda: _state(boss, "fast", job_id) is JobState.FAILED, what="both attempts failed")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    said = f"WARNING qcore.worker: queue 'fast': job {job_id} failed"
    assert f"{said} (attempt 1 of 2): ValueError: the payload has no 'to' field" in out, out
    assert f"{said} (attempt 2 of 2): ValueError" in out and "retries exhausted" in out, out
    assert out.count("Traceback") == 1, out  # once for this error, not per attempt


def test_a_handler_for_a_queue_that_does_not_exist_is_refused_at_start(
    app: tuple[SyncBoss, dict[str, str]],
) -> None:
    _, env = app
    done = _run_app(env, "ghostapp", GHOST_APP)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "queues ghost, phantom do not exist" in lines[0]
    assert "qcore queue create ghost" in lines[0] and "boss.create_queue('ghost')" in lines[0]


def test_a_url_scheme_typo_is_one_line_and_exit_2(app: tuple[SyncBoss, dict[str, str]]) -> None:
    _, env = app
    expected = "not a PostgreSQL URL: scheme 'postgress' (expected postgresql:// or postgres://)"
    done = _run_app(env, "typoapp", TYPO_APP)  # the application's own Boss(...)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "s3cret" not in done.stderr
    for args, extra in (
        (["queues", "--url", "postgress://app:s3cret-pw@127.0.0.1:5432/app"], {}),
        (["doctor"], {"DATABASE_URL": "http://app:s3cret-pw@127.0.0.1:5432/app"}),
    ):
        done = run_qcore(*args, env=extra)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "not a PostgreSQL URL: scheme" in done.stderr and "s3cret" not in done.stderr
