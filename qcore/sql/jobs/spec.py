"""A claim's options, checked once: the :class:`FetchSpec` that claim verbs and builders share.

A worker builds its spec when it is created; a one-off ``fetch``, ``complete_and_fetch``
or ``locked_fetch`` at the top of the call. Past that point nothing checks the options
again: the spec is frozen, and every field is hashable, so the claim builders'
statement caches key on it directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from qcore.options import GroupLimits, fetch_options


@dataclass(frozen=True, slots=True)
class FetchSpec:
    """What a claim takes and how (``fetch``'s options, checked).

    Build it with :meth:`of`, which raises what ``fetch`` raises for bad options.
    """

    batch_size: int = 1
    priority: bool = True
    order_by_created_on: bool = True
    include_metadata: bool = False
    ignore_start_after: bool = False
    min_priority: int | None = None
    max_priority: int | None = None
    group_concurrency: GroupLimits | None = None
    ignore_groups: tuple[str, ...] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> FetchSpec:
        """The spec of a fetch's options (those left out take their defaults), checked.

        Raises ValidationError naming what is wrong.
        """
        return cls(**fetch_options(options))

    def sized(self, batch_size: int) -> FetchSpec:
        """This spec claiming ``batch_size`` jobs (a count already checked)."""
        return self if batch_size == self.batch_size else replace(self, batch_size=batch_size)

    def ignoring(self, groups: Iterable[str]) -> FetchSpec:
        """This spec also leaving the jobs of ``groups`` to other claimers.

        The group ids are read from jobs, so already checked.
        """
        return replace(self, ignore_groups=(*(self.ignore_groups or ()), *groups))


#: the spec of a fetch given no options
DEFAULT_FETCH = FetchSpec()
