"""``get_queue_stats(percentiles=...)``: the percents are checked before anything is
read, and a percentile is read off the wait/run histogram as pg-boss reads it (the
interop test compares the numbers with pg-boss's own on one snapshot)."""

from __future__ import annotations

from typing import Any

import pytest

from qcore import Boss
from qcore.errors import ValidationError
from qcore.sql.stats import LATENCY_MIN_SECONDS, LATENCY_SLOTS
from qcore.verbs.stats import latency_percentile

pytestmark = pytest.mark.feature("stats")


def _bins(**slots: int) -> list[int]:
    counts = [0] * LATENCY_SLOTS
    for slot, n in slots.items():
        counts[int(slot.lstrip("s"))] = n
    return counts


def test_a_percentile_of_the_histogram() -> None:
    assert latency_percentile(None, 50) is None
    assert latency_percentile(_bins(), 50) is None  # no job finished
    assert latency_percentile(_bins(s0=4), 99) == LATENCY_MIN_SECONDS  # under 10 ms
    last = LATENCY_SLOTS - 1
    edge = LATENCY_MIN_SECONDS * 2 ** ((last - 1) / 2)
    assert latency_percentile(_bins(**{f"s{last}": 1}), 50) == pytest.approx(edge)
    # one slot of ten jobs, 20-28.3 ms: the percentile moves through it on the √2 scale
    inside = [latency_percentile(_bins(s3=10), p) for p in (10, 50, 100)]
    low = LATENCY_MIN_SECONDS * 2 ** (2 / 2)
    assert inside == pytest.approx([low * 2 ** (0.1 / 2), low * 2 ** (0.5 / 2), low * 2**0.5])
    median, above = (latency_percentile(_bins(s1=1, s5=1), p) for p in (50, 51))
    assert median is not None and above is not None and median < above


@pytest.mark.postgres
async def test_bad_percentiles_are_refused_before_any_read(pg_dsn: str) -> None:
    async with Boss(pg_dsn, schema="qcore_percentiles", supervise=False, schedule=False) as boss:
        bad: list[Any] = [[], [0], [101], ["50"], [True], "50", 50, [50, None]]
        for value in bad:
            with pytest.raises(ValidationError, match="percentiles must be"):
                await boss.get_queue_stats("no-such-queue", percentiles=value)
        await boss.db.execute_script("DROP SCHEMA qcore_percentiles CASCADE")
