"""What both sides of a scenario share: the job payload, the sizes, process figures.

Nothing here imports qcore at module level, so a raw-baseline child process
loads only psycopg (its memory figure is that of a plain psycopg client);
:func:`open_boss` imports qcore when a qcore child calls it.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qcore import Boss

__all__ = [
    "APPLICATION",
    "BATCH_INSERT",
    "COUNTED",
    "FETCH_COLUMNS",
    "PAD",
    "DrainCounter",
    "Meter",
    "drop_schema",
    "open_boss",
    "payload",
    "peak_rss_mib",
    "progress",
    "quote_ident",
    "rss_mib",
    "shares",
    "spans",
    "warm_pool",
]

#: the filler in every job's data: each payload is ``{"i": <n>, "pad": "x" * PAD}``
PAD = 64
#: bulk enqueue writes this many jobs per ``insert`` call
BATCH_INSERT = 1000
#: what a claim returns, on both sides: qcore's fetch columns (qcore.sql.jobs.FETCH_COLUMNS)
FETCH_COLUMNS = (
    "id",
    "name",
    "priority",
    "data",
    "created_on",
    "retry_count",
    "expire_seconds",
    "heartbeat_seconds",
    "group_id",
    "group_tier",
)


def payload(i: int) -> dict[str, Any]:
    """The data of job ``i``: the same on both sides, the same size for every job."""
    return {"i": i, "pad": "x" * PAD}


def shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal whole shares."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def spans(total: int, parts: int) -> list[tuple[int, int]]:
    """``total`` split into ``parts`` consecutive ``(first, count)`` spans."""
    out, first = [], 0
    for count in shares(total, parts):
        out.append((first, count))
        first += count
    return out


def quote_ident(name: str) -> str:
    """A double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


async def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and what is in it, if it is there (once its Boss has stopped, so
    nothing of the Boss runs on against a schema gone)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, in MiB.

    On Linux ``VmHWM`` of ``/proc/self/status``: the high-water mark of this
    process's own address space. Not ``ru_maxrss``, which Linux carries across
    ``exec`` from the forked copy of the parent (so every child would report at
    least the parent's size).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def rss_mib() -> float:
    """This process's resident set size now, in MiB."""
    import psutil

    return float(psutil.Process(os.getpid()).memory_info().rss) / (1024 * 1024)


#: the application_name of this process's connections, so its server backends can be found
APPLICATION = f"bench-{os.getpid()}"

_t0 = time.monotonic()
#: the counting adapters ``open_boss`` made (``count`` specs); their owner closes them
COUNTED: list[Any] = []


def progress(message: str) -> None:
    """A progress line on stderr (stdout carries results only)."""
    print(f"[bench {time.monotonic() - _t0:7.1f}s] {message}", file=sys.stderr, flush=True)


class DrainCounter:
    """Jobs settled so far by the loops of one drain; ``done`` fires at the total."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.done = asyncio.Event()

    def add(self, n: int) -> None:
        self.count += n
        if self.count >= self.total:
            self.done.set()

    @property
    def finished(self) -> bool:
        return self.count >= self.total


async def open_boss(spec: dict[str, Any], **options: Any) -> Boss:
    """A started ``Boss`` on the scenario's schema, without supervisor and timekeeper: the
    bench measures the verbs and the workers (the pg-boss side runs without them too).

    With ``spec["count"]`` (``python -m bench profile``) it runs on qcore's own pool
    wrapped in :class:`bench.idle.CountingDatabase`, reachable as ``boss.db``.
    """
    from qcore import Boss

    common: dict[str, Any] = {
        "schema": spec["schema"],
        "backend": spec["backend"],
        "supervise": False,
        "schedule": False,
        **options,
    }
    if spec.get("count"):
        from bench.idle import CountingDatabase
        from qcore.db import connect

        pool = common.pop("max", 10)
        inner = await connect(spec["dsn"], max=pool, application_name=APPLICATION)
        counting = CountingDatabase(inner)
        COUNTED.append(counting)
        boss = Boss(db=counting, **common)
    else:
        boss = Boss(spec["dsn"], application_name=APPLICATION, **common)
    await boss.start()
    return boss


async def warm_pool(boss: Boss, size: int) -> None:
    """Open ``size`` pool connections before the clock starts (the raw side connects its
    connections up front too): a few rounds of ``size`` overlapping short sleeps."""
    for _ in range(3):
        await asyncio.gather(*(boss.db.execute("SELECT pg_sleep(0.02)") for _ in range(size)))


class Meter:
    """CPU time over the timed section: this process's, and that of the server backends
    serving this process's connections (found by ``application_name`` in
    ``pg_stat_activity``, read with psutil, so only when the server runs on this
    host and its processes are readable; else ``server_cpu_s`` is None)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._client0 = 0.0
        self._started = 0.0
        self._server0: dict[int, float] | None = None

    async def _server(self) -> dict[int, float] | None:
        import psutil
        import psycopg

        try:
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                cur = await conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
                )
                pids = [int(r[0]) for r in await cur.fetchall()]
        except psycopg.Error:
            return None
        times: dict[int, float] = {}
        for pid in pids:
            try:
                cpu = psutil.Process(pid).cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            times[pid] = cpu.user + cpu.system
        return times if times or not pids else None

    @staticmethod
    def _client() -> float:
        t = os.times()
        return t.user + t.system

    async def start(self) -> None:
        """Take the readings, then start the clock of the timed section."""
        self._server0 = await self._server()
        self._client0 = self._client()
        self._started = time.perf_counter()

    async def stop(self) -> dict[str, Any]:
        """Stop the clock, then take the readings: ``elapsed``, ``client_cpu_s`` and
        ``server_cpu_s`` (None when the server's processes cannot be read)."""
        elapsed = time.perf_counter() - self._started
        client = self._client() - self._client0
        server1 = await self._server()
        server: float | None = None
        if self._server0 is not None and server1 is not None:
            server = sum(t - self._server0.get(pid, 0.0) for pid, t in server1.items())
        return {"elapsed": elapsed, "client_cpu_s": client, "server_cpu_s": server}
