"""A fetch's and a worker's options (``fetch``, ``work``), with their defaults.

Batch size, priority bounds, group limits.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from qcore.errors import ValidationError
from qcore.options.scalars import INT4_MIN, check_flag, check_int, known_only
from qcore.options.text import check_key

__all__ = [
    "FETCH_DEFAULTS",
    "FETCH_OPTIONS",
    "WORK_OPTIONS",
    "FetchOptions",
    "GroupConcurrency",
    "GroupLimits",
    "WorkArguments",
    "check_batch_size",
    "fetch_options",
    "group_limits",
    "ignored_groups",
    "priority_bounds",
]


class GroupConcurrency(TypedDict, total=False):
    """A per-group limit with tiers (pg-boss's ``{default, tiers}``).

    ``default`` for every group, ``tiers`` for the groups whose jobs carry that
    ``group_tier``.
    """

    default: int
    tiers: Mapping[str, int]


class FetchOptions(TypedDict, total=False):
    """Options of ``fetch`` (and of ``work``, which fetches with them)."""

    batch_size: int
    priority: bool
    order_by_created_on: bool
    include_metadata: bool
    ignore_start_after: bool
    min_priority: int | None
    max_priority: int | None
    group_concurrency: int | GroupConcurrency | None
    ignore_groups: Collection[str] | None


class WorkArguments(FetchOptions, total=False):
    """Options of ``work`` and ``handler``: the fetch's, and how the worker runs."""

    local_concurrency: int
    polling_interval_seconds: float
    heartbeat_refresh_seconds: float | None
    notify_polling_interval_seconds: float | None
    local_group_concurrency: int | GroupConcurrency | None
    per_job_results: bool
    burst_when_ready_exceeds: int | None
    burst_when_batch_full: bool
    locked_fetch: bool


#: every option of a fetch
FETCH_OPTIONS: Final = tuple(FetchOptions.__annotations__)

#: every option of ``work`` (and ``handler``)
WORK_OPTIONS: Final = tuple(WorkArguments.__annotations__)


def check_batch_size(value: object) -> int:
    """A fetch's ``batch_size``: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"batch_size must be an integer >= 1, got {value!r}")
    return value


#: a fetch's options left out take these
FETCH_DEFAULTS: Final[Mapping[str, Any]] = {
    "batch_size": 1,
    "priority": True,
    "order_by_created_on": True,
    "include_metadata": False,
    "ignore_start_after": False,
    "min_priority": None,
    "max_priority": None,
    "group_concurrency": None,
    "ignore_groups": None,
}


def fetch_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A fetch's options, validated, with the defaults of those left out.

    One set of checks serves ``fetch`` and ``work``.
    """
    known_only("fetch", options, FETCH_OPTIONS)
    merged = {**FETCH_DEFAULTS, **options}
    check_batch_size(merged["batch_size"])
    for flag in ("priority", "order_by_created_on", "include_metadata", "ignore_start_after"):
        check_flag(flag, merged[flag])
    priority_bounds(merged["min_priority"], merged["max_priority"])
    if merged["group_concurrency"] is not None:
        merged["group_concurrency"] = group_limits("group_concurrency", merged["group_concurrency"])
    if merged["ignore_groups"] is not None:
        merged["ignore_groups"] = ignored_groups(merged["ignore_groups"])
    return merged


@dataclass(frozen=True)
class GroupLimits:
    """A validated ``group_concurrency``: the limit of every group, and the tiers' own."""

    default: int
    tiers: tuple[tuple[str, int], ...] = ()

    def limit(self, tier: str | None) -> int:
        """The limit of a group whose jobs carry ``tier``."""
        return dict(self.tiers).get(tier, self.default) if tier is not None else self.default

    @property
    def largest(self) -> int:
        return max([self.default, *(n for _, n in self.tiers)])

    def as_option(self) -> int | dict[str, Any]:
        """The limits as the option is written: the integer, or ``{default, tiers}``."""
        if not self.tiers:
            return self.default
        return {"default": self.default, "tiers": dict(self.tiers)}

    def tiers_json(self) -> str:
        """The tiers as the JSON object the claim reads (tier -> limit)."""
        return json.dumps(dict(self.tiers))


def group_limits(name: str, value: object) -> GroupLimits:
    """Check ``group_concurrency`` (or ``local_group_concurrency``).

    An integer >= 1, or ``{"default": n, "tiers": {tier: n}}`` with every limit an
    integer >= 1.
    """
    if isinstance(value, GroupLimits):
        return value
    if not isinstance(value, Mapping):
        return GroupLimits(check_int(name, value, minimum=1))
    known_only(name, value, ("default", "tiers"))
    if "default" not in value:
        raise ValidationError(f"{name} needs a default (the limit of a group with no tier)")
    default = check_int(f"{name}['default']", value["default"], minimum=1)
    tiers = value.get("tiers") or {}
    if not isinstance(tiers, Mapping):
        raise ValidationError(f"{name}['tiers'] must map tier names to limits, got {tiers!r}")
    checked = []
    for tier, limit in tiers.items():
        check_key(f"a {name} tier name", tier)
        checked.append((tier, check_int(f"{name}['tiers'][{tier!r}]", limit, minimum=1)))
    return GroupLimits(default, tuple(sorted(checked)))


def ignored_groups(value: object) -> tuple[str, ...]:
    """``ignore_groups``: the group ids a fetch leaves alone (a list of strings)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValidationError(f"ignore_groups must be a list of group ids, got {value!r}")
    return tuple(check_key("an ignored group id", v) for v in value)


def priority_bounds(minimum: object, maximum: object) -> tuple[int | None, int | None]:
    """``min_priority``/``max_priority`` of a fetch, each optional, min <= max."""
    low = None if minimum is None else check_int("min_priority", minimum, minimum=INT4_MIN)
    high = None if maximum is None else check_int("max_priority", maximum, minimum=INT4_MIN)
    if low is not None and high is not None and low > high:
        raise ValidationError(f"min_priority ({low}) must be <= max_priority ({high})")
    return low, high
