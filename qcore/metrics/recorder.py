"""The recorder: every ``interval_seconds`` it adds each queue's finished jobs to the store.

It counts each queue's completed and failed jobs per closed minute, samples their wait
and run times, reads the age of the oldest waiting job, and adds what is new to the
store's minute, hour and day rows and to the rollup across queues.

A queue's jobs are counted by the minute of ``completed_on`` on the schema's clock, up
to the last minute closed ``margin_seconds`` ago (a commit that lands late still falls
in a minute not yet counted). A queue is sampled on a tick by one recorder only: the one
holding its sampling lease, taken only where it expired, on the store's clock (a
recorder that stops hands its leases back). A queue's counts and histograms of a tick
are one atomic write in the store: the incoming minutes are diffed against the stored
minute rows and only the difference goes to every tier, so a second recorder, a
restart, or the same minutes counted again add nothing; a failing latency read never
undoes the counts. A long stretch (a first tick reads up to seven days) is written
oldest first in parts of ``SNAPSHOT_MINUTES``. A restarted recorder resumes from the
newest minute stored (jobs counted before may have been deleted since). Minutes with
nothing to record are never written. Each tier is pruned past its retention once a day.

Counts and latency need an index on ``(name, completed_on)`` (pg-boss's ``job_i16``);
a queue without one is left out of both, said once through a ``warning`` with the
statements that build it, and checked again every ``index_check_seconds``. The age
gauge needs only the fetch index and is recorded every tick.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, cast

from qcore.context import Context
from qcore.errors import ValidationError
from qcore.events import Events
from qcore.metrics.postgres_store import PostgresMetricsStore
from qcore.metrics.sources import Clock, Counts, Latency, PgBossQueues
from qcore.metrics.store import GLOBAL, MINUTES_PER_DAY, MetricsStore, Retention, Snapshot
from qcore.periodic import Periodic

if TYPE_CHECKING:
    from qcore.boss import Boss

__all__ = ["MetricsRecorder", "record_metrics"]

log = logging.getLogger("qcore.metrics")

#: the most minutes one store write carries (a first tick reads up to seven days of them)
SNAPSHOT_MINUTES = 720


def _number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValidationError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


class MetricsRecorder(Periodic):
    """Records ``sources`` into ``store``.

    :meth:`tick` once, or :meth:`start` to tick now and every ``interval_seconds`` until
    :meth:`stop` (a background service, so a ``Boss`` can run it:
    :func:`qcore.metrics.record_metrics`).

    ``on_snapshot_error(exc, queue)`` hears about a queue whose counts failed (``queue``
    empty: the whole tick), ``on_latency_error(exc, queue)`` about a failed latency or
    age step; the next tick retries either. Without them a failure is logged (or, with
    ``events``, emitted as ``error``). ``on_warning(message, statements)`` hears that
    queues lack the counts' index (default: a ``warning`` event with ``events``, else a
    log line). A queue's sampling lease lasts 1.5 intervals: a recorder that stops
    leaves its queues to the others after that long."""

    name = "metrics"

    def __init__(
        self,
        store: MetricsStore,
        sources: PgBossQueues,
        *,
        interval_seconds: float = 60.0,
        retention: Retention | None = None,
        retention_days: int | None = None,
        margin_seconds: float = 5.0,
        latency: bool = True,
        max_samples_per_tick: int = 1000,
        index_check_seconds: float = 300.0,
        holder: str | None = None,
        on_snapshot_error: Callable[[BaseException, str], Any] | None = None,
        on_latency_error: Callable[[BaseException, str], Any] | None = None,
        on_warning: Callable[[str, list[str]], Any] | None = None,
        events: Events | None = None,
    ) -> None:
        if retention is not None and retention_days is not None:
            raise ValidationError("give retention or retention_days, not both")
        if not isinstance(latency, bool):
            raise ValidationError(f"latency must be True or False, got {latency!r}")
        if (
            isinstance(max_samples_per_tick, bool)
            or not isinstance(max_samples_per_tick, int)
            or not 10 <= max_samples_per_tick <= 100_000
        ):
            raise ValidationError(
                f"max_samples_per_tick must be a whole number from 10 to 100000,"
                f" got {max_samples_per_tick!r}"
            )
        super().__init__(
            events,
            _number("interval_seconds", interval_seconds, 1, 3600),
            detached=True,
            at_start=True,
        )
        self.store = store
        self.sources = sources
        self.retention = (
            Retention.of_days(retention_days) if retention_days is not None else retention
        ) or Retention()
        self.margin_seconds = _number("margin_seconds", margin_seconds, 0, 600)
        self.latency = latency
        self.max_samples_per_tick = max_samples_per_tick
        self.index_check_seconds = _number("index_check_seconds", index_check_seconds, 1, 86400)
        self.on_snapshot_error = on_snapshot_error
        self.on_latency_error = on_latency_error
        self.on_warning = on_warning
        if holder is not None and (not isinstance(holder, str) or not holder):
            raise ValidationError(f"holder must be a non-empty string, got {holder!r}")
        #: this recorder's name on the sampling leases (a restarted recorder given the
        #: same name takes its leases back at once; another waits for them to expire)
        self.holder = holder or uuid.uuid4().hex
        self._next: dict[str, int] = {}  # queue key -> first minute not yet recorded
        self._indexed: dict[str, bool] = {}
        self._indexed_at: float | None = None
        self._warned: set[str] = set()
        self._pruned_day: int | None = None
        self._held: list[str] = []  # the keys whose leases this recorder holds

    async def run_pass(self) -> None:
        try:
            await self.tick()
        except Exception as exc:  # the database is away: the next tick tries again
            if self.on_snapshot_error is None:
                raise
            self.on_snapshot_error(exc, "")

    def _key(self, queue: str) -> str:
        return self.sources.namespace + queue

    async def tick(self) -> int:
        """Record every queue once (and prune, once a day).

        Returns how many queue-minutes of finished jobs changed.
        """
        await self.store.ready()
        clock = await self.sources.clock(self.margin_seconds)
        queues = await self.sources.names()
        held = await self._leases(queues)
        await self._check_indexes(queues)
        changed = 0
        for queue in queues:
            if self.stopping:
                break
            if queue not in held or not self._indexed.get(queue, True):
                self._next.pop(self._key(queue), None)  # from the store when ours again
                continue
            try:
                changed += await self._record_finished(queue, clock)
            except Exception as exc:
                if self.on_snapshot_error is None:
                    raise
                self.on_snapshot_error(exc, queue)
        if self.latency and held:
            await self._guarded(self._record_ages([q for q in queues if q in held], clock))
        if self._pruned_day != clock.closed // MINUTES_PER_DAY:
            await self.store.prune(self.retention, minute=clock.closed)
            self._pruned_day = clock.closed // MINUTES_PER_DAY
        return changed

    async def stop(self) -> None:
        """Stop ticking and hand this recorder's leases back.

        So another recorder samples its queues from its next tick instead of after the
        leases expire.
        """
        await super().stop()
        held, self._held = self._held, []
        if held:
            try:
                await self.store.release_leases(held, holder=self.holder)
            except Exception as exc:  # the store is away: the leases simply expire
                log.warning("could not release the metrics leases: %s", exc)

    async def _guarded(self, step: Any, queue: str = "") -> bool:
        """Run a latency or age step; its failure goes to ``on_latency_error``."""
        try:
            await step
        except Exception as exc:
            if self.on_latency_error is not None:
                self.on_latency_error(exc, queue)
            elif self.events is not None:
                self.events.emit("error", exc)
            else:
                log.warning("a metrics latency step for %r failed: %s", queue, exc)
            return False
        return True

    async def _leases(self, queues: Sequence[str]) -> set[str]:
        """The queues this recorder samples on this tick (their lease is its own)."""
        keys = [self._key(q) for q in queues]
        got = await self.store.take_leases(
            keys, holder=self.holder, seconds=self.interval_seconds * 1.5
        )
        self._held = [k for k in keys if k in got]
        return {q for q, k in zip(queues, keys, strict=True) if k in got}

    async def _check_indexes(self, queues: Sequence[str]) -> None:
        due = self._indexed_at is None or (
            time.monotonic() - self._indexed_at >= self.index_check_seconds
        )
        if not due and all(q in self._indexed for q in queues):
            return
        self._indexed = await self.sources.indexed()
        self._indexed_at = time.monotonic()
        missing = [q for q in queues if not self._indexed.get(q, True)]
        self._warned &= set(missing)  # a queue that gained its index may warn again later
        new = [q for q in missing if q not in self._warned]
        if new:
            self._warned |= set(new)
            self._warn(new, await self.sources.index_statements(new))

    def _warn(self, queues: list[str], statements: list[str]) -> None:
        message = (
            f"metrics history: no index on (name, completed_on) serves queue(s)"
            f" {', '.join(map(repr, queues))}; their counts and latency stay off until one"
            " exists (qcore never builds it). Build it without blocking writes:\n"
            + ";\n".join(statements)
            + ";"
        )
        if self.on_warning is not None:
            self.on_warning(message, statements)
        elif self.events is not None:
            self.events.warn("metrics_index", message, queues=queues, statements=statements)
        else:
            log.warning("%s", message)

    async def _first_minute(self, key: str, clock: Clock) -> int:
        oldest = clock.closed - self.retention.minutes * MINUTES_PER_DAY
        if key in self._next:
            return max(self._next[key], oldest)
        newest = await self.store.newest_minute(key)
        if newest is not None:
            return max(newest, oldest)  # counted again: the diff adds only news
        return oldest

    async def _record_finished(self, queue: str, clock: Clock) -> int:
        """Record the minutes closed since the last tick.

        Counts and latency samples are read, then written in one atomic step. A failed
        latency read leaves the counts to be written alone and the watermark where it
        was, so the next tick samples those minutes again.
        """
        key = self._key(queue)
        first = await self._first_minute(key, clock)
        if first >= clock.closed:
            return 0
        counts = await self.sources.finished(queue, first, clock.closed)
        samples: Latency | None = {}
        if self.latency and counts:
            samples = await self._sampled(queue, counts)
        changed = 0
        minutes = sorted(counts)
        for start in range(0, len(minutes), SNAPSHOT_MINUTES):
            # oldest first: a write cut short leaves the newest stored minute where the
            # next tick resumes, and no single write outlasts a client's socket timeout
            part = minutes[start : start + SNAPSHOT_MINUTES]
            snapshot = Snapshot(
                key=key,
                rollup=self.sources.namespace + GLOBAL,
                counts={m: counts[m] for m in part},
                latency={m: samples[m] for m in part if samples and m in samples},
                minute=clock.current,
                retention=self.retention,
            )
            changed += await self.store.add_snapshot(snapshot)
        if samples is not None:
            self._next[key] = clock.closed
        return changed

    async def _sampled(self, queue: str, counts: Counts) -> Latency | None:
        """The latency samples of ``counts``' minutes; None when the read failed."""
        samples: Latency = {}

        async def read() -> None:
            samples.update(await self.sources.latency(queue, counts, self.max_samples_per_tick))

        return samples if await self._guarded(read(), queue) else None

    async def _record_ages(self, queues: list[str], clock: Clock) -> None:
        ages = {self._key(q): age for q, age in (await self.sources.queue_ages(queues)).items()}
        if ages:
            ages[self.sources.namespace + GLOBAL] = max(ages.values())
            await self.store.add_ages(ages, minute=clock.current, retention=self.retention)


async def record_metrics(
    boss: Boss,
    *,
    store: MetricsStore | None = None,
    schema: str | None = None,
    table_prefix: str = "qcore_metrics_",
    allow: Collection[str] | None = None,
    **options: Any,
) -> None:
    """Record ``boss``'s queues while it runs.

    A :class:`MetricsRecorder` is started and stopped with it, its warnings and errors
    on the boss's events, into ``store`` (default: a :class:`PostgresMetricsStore` on
    the boss's connection, in ``schema``, default the queues' own, tables named with
    ``table_prefix``). Its rows are keyed by the boss's job schema whatever schema holds
    them, so a provider or admin reading a store in another schema is told that job
    schema (``PostgresMetricsStore(db, schema=..., queue_schema=...)``). ``options``
    are the recorder's, checked now.
    """
    if store is not None and (schema is not None or table_prefix != "qcore_metrics_"):
        raise ValidationError("give a store, or the schema and table_prefix of one, not both")
    MetricsRecorder(cast(Any, None), cast(Any, None), **options)  # bad options fail here

    def make(ctx: Context, events: Events) -> MetricsRecorder:
        into = store or PostgresMetricsStore(
            ctx.db,
            schema=schema or ctx.schema_spec,
            backend=ctx.backend,
            table_prefix=table_prefix,
            queue_schema=ctx.schema_spec,
        )
        return MetricsRecorder(into, PgBossQueues(ctx, allow=allow), events=events, **options)

    await boss.add_service(make)
