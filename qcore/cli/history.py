"""The metrics-history options ``qcore metrics`` and ``qcore dashboard --history`` share.

Declared once here: where the store lives (``--store-schema``, or Redis with ``--redis
URL``, ``--redis-prefix``, ``--redis-cluster``) and how a recorder keeps it
(``--interval``, ``--retention-days`` or the per-tier ``--retain-minutes``,
``--retain-hours``, ``--retain-days``, ``--no-latency``). :func:`recording_from`
checks them before anything connects: a bad value is a :class:`UsageError` that names
the option and what it allows (the rules are the library's own: :class:`Retention`'s
and :class:`MetricsRecorder`'s). :func:`store_from` opens the store they name.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from qcore.context import Context
from qcore.errors import ValidationError
from qcore.metrics import MetricsRecorder, MetricsStore, PostgresMetricsStore, RedisMetricsStore
from qcore.metrics.store import Retention

__all__ = [
    "DEFAULT_INTERVAL",
    "REDIS_PREFIX",
    "Recording",
    "UsageError",
    "add_recorder_arguments",
    "add_store_arguments",
    "check_store",
    "recording_from",
    "retention_from",
    "store_from",
]

#: the key prefix of a Redis store when ``--redis-prefix`` is not given
REDIS_PREFIX = "qcore:metrics"
#: seconds between a recorder's ticks when ``--interval`` is not given
DEFAULT_INTERVAL = 60.0

#: the per-tier options: option -> Retention's field
_TIERS = {"--retain-minutes": "minutes", "--retain-hours": "hours", "--retain-days": "days"}

T = TypeVar("T")


class UsageError(ValidationError):
    """An option the command refuses before connecting (exit status 2)."""


def add_store_arguments(parser: Any) -> None:
    """Where the store lives: ``--store-schema``, or Redis (``--redis`` and its two)."""
    parser.add_argument(
        "--store-schema",
        default=None,
        metavar="SCHEMA",
        help="the schema holding the store's tables (default: --schema); the history kept"
        " there is still that of --schema's queues",
    )
    parser.add_argument(
        "--redis",
        default=None,
        metavar="URL",
        help="keep history in Redis (not with --store-schema)",
    )
    parser.add_argument(
        "--redis-prefix",
        default=REDIS_PREFIX,
        metavar="PREFIX",
        help=f"its key prefix (default: {REDIS_PREFIX})",
    )
    parser.add_argument("--redis-cluster", action="store_true", help="URL is a cluster node")


def add_recorder_arguments(parser: Any) -> None:
    """How a recorder keeps the history: its interval, retention and latency."""
    parser.add_argument(
        "--interval",
        default=None,
        metavar="SECONDS",
        help=f"seconds between the recorder's ticks, 1 to 3600 (default: {DEFAULT_INTERVAL:g})",
    )
    parser.add_argument(
        "--retention-days",
        default=None,
        metavar="N",
        help="keep hour and day rows N days, minute rows the default 7 (1 to 3650)",
    )
    defaults = Retention()
    for option, tier in _TIERS.items():
        parser.add_argument(
            option,
            default=None,
            metavar="DAYS",
            help=f"days the {tier[:-1]} rows are kept, 1 to 3650"
            f" (default: {defaults.keeps(tier[0])}); not with --retention-days",
        )
    parser.add_argument(
        "--no-latency",
        dest="latency",
        action="store_false",
        help="record counts only: no wait and run histograms, no queue-age gauge",
    )


@dataclass(frozen=True)
class Recording:
    """What the recorder options asked for, checked."""

    interval_seconds: float
    retention: Retention
    latency: bool

    def recorder(self, store: MetricsStore, sources: Any, **options: Any) -> MetricsRecorder:
        """A recorder of ``sources`` into ``store`` as asked (``options``: the rest)."""
        return MetricsRecorder(
            store,
            sources,
            interval_seconds=self.interval_seconds,
            retention=self.retention,
            latency=self.latency,
            **options,
        )


def _parsed(text: str, kind: Callable[[str], T]) -> T | str:
    """``text`` as a ``kind``, or as given when it is not one (the check then says so)."""
    try:
        return kind(text)
    except ValueError:
        return text


def _named(option: str, check: Callable[[], T]) -> T:
    """``check()``, its ``ValidationError`` a :class:`UsageError` naming ``option``.

    The library's message names its own parameter first (``Retention.minutes must
    be ...``): the option takes its place.
    """
    try:
        return check()
    except ValidationError as exc:
        message = str(exc)
        said = re.match(r"[\w.]+ (must be .*)", message, re.DOTALL)
        raise UsageError(f"{option} {said[1]}" if said else f"{option}: {message}") from None


def retention_from(args: argparse.Namespace) -> Retention:
    """The :class:`Retention` the options ask for (the default one when none is given)."""
    if args.retention_days is not None:
        given = [option for option in _TIERS if getattr(args, _dest(option)) is not None]
        if given:
            raise UsageError(f"give --retention-days or {', '.join(given)}, not both")
        days = _parsed(args.retention_days, int)
        return _named("--retention-days", lambda: Retention.of_days(days))  # type: ignore[arg-type]
    tiers: dict[str, int] = {}
    for option, tier in _TIERS.items():
        text = getattr(args, _dest(option))
        if text is not None:
            tiers[tier] = _named(option, _tier_check(tier, _parsed(text, int)))
    return Retention(**tiers)


def _tier_check(tier: str, value: Any) -> Callable[[], int]:
    """Retention's own check of ``value`` as the days of ``tier``."""
    return lambda: int(getattr(Retention(**{tier: value}), tier))


def recording_from(args: argparse.Namespace) -> Recording:
    """The recorder options, checked before anything connects."""
    interval: Any = DEFAULT_INTERVAL if args.interval is None else _parsed(args.interval, float)
    retention = retention_from(args)
    # the recorder's own checks, without a store: as record_metrics checks its options
    _named("--interval", lambda: MetricsRecorder(None, None, interval_seconds=interval))  # type: ignore[arg-type]
    return Recording(interval_seconds=float(interval), retention=retention, latency=args.latency)


def check_store(args: argparse.Namespace) -> None:
    """A usage error when the store's options contradict each other."""
    if args.redis is not None and args.store_schema is not None:
        raise UsageError("give --store-schema or --redis, not both")


def store_from(
    args: argparse.Namespace, ctx: Context, *, migrate: bool = True, database: str | None = None
) -> MetricsStore:
    """The store the options name, holding the history of ``ctx``'s job schema.

    In PostgreSQL on ``ctx``'s connection (its tables created on first use with
    ``migrate``), or in Redis under ``--redis-prefix``; ``database`` names another
    database of a board, whose Redis keys go under ``<prefix>.<database>`` so that two
    databases' queues of one schema never share a key.
    """
    check_store(args)
    if args.redis is not None:
        prefix = args.redis_prefix if database is None else f"{args.redis_prefix}.{database}"
        return RedisMetricsStore(
            args.redis, prefix=prefix, schema=ctx.schema, cluster=args.redis_cluster
        )
    return PostgresMetricsStore(
        ctx.db,
        schema=args.store_schema or ctx.schema_spec,
        backend=ctx.backend,
        migrate=migrate,
        queue_schema=ctx.schema_spec,
    )


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")
