"""The one bucket layout of every latency histogram, and the percentiles read off it.

A histogram is 18 counts: slot ``i`` holds the samples from ``BOUNDS_MS[i - 1]``
(inclusive; 0 for the first slot) to ``BOUNDS_MS[i]`` (exclusive; no upper end for the
last slot, 30 minutes and longer). The layout is fixed: two ranges can only be merged
into one percentile when they were counted with the same bounds, and a 90-day chart
merges buckets of 90 days.

A percentile is an estimate: the slot that holds it is exact, the value inside the slot
is interpolated on a logarithmic scale between the slot's bounds, so the error is at
most the slot's width (a 2–2.5× step). In the open last slot the estimate is its lower
bound, 30 minutes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["BOUNDS_MS", "SLOTS", "merge", "percentile", "slot_of", "subtract"]

#: the slots' upper bounds in milliseconds (the last slot has none)
BOUNDS_MS: tuple[float, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000,
    60_000, 120_000, 300_000, 600_000, 1_800_000,
)  # fmt: skip

#: counts per histogram
SLOTS = len(BOUNDS_MS) + 1

#: the lowest value a slot's log interpolation starts from (the first slot's "zero")
_FLOOR_MS = 1.0


def slot_of(ms: float) -> int:
    """The slot a sample of ``ms`` milliseconds falls in (as SQL's ``width_bucket``)."""
    for i, bound in enumerate(BOUNDS_MS):
        if ms < bound:
            return i
    return SLOTS - 1


def merge(histograms: Sequence[Sequence[int]]) -> list[int]:
    """Slot-wise sum of histograms of one length."""
    total = [0] * max((len(h) for h in histograms), default=SLOTS)
    for h in histograms:
        for i, n in enumerate(h):
            total[i] += n
    return total


def subtract(minuend: Sequence[int], subtrahend: Sequence[int]) -> list[int]:
    """What ``minuend`` holds beyond ``subtrahend``, slot by slot, never below zero."""
    return [max(a - b, 0) for a, b in zip(minuend, subtrahend, strict=True)]


def percentile(counts: Sequence[int], p: float) -> float | None:
    """The estimated ``p``-th percentile (0 < p < 100) in milliseconds.

    None when the histogram is empty.
    """
    total = sum(counts)
    if total <= 0:
        return None
    rank = p / 100 * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i == SLOTS - 1:
                return float(BOUNDS_MS[-1])
            low = BOUNDS_MS[i - 1] if i else _FLOOR_MS
            high = BOUNDS_MS[i]
            share = (rank - seen) / n
            value = math.exp(math.log(low) + share * (math.log(high) - math.log(low)))
            return min(value, math.nextafter(high, 0.0))  # the bound belongs to the next slot
        seen += n
    return float(BOUNDS_MS[-1])
