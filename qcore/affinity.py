"""Job affinity: a job may name the servers allowed to run it.

It names them as a regular expression over their instance keys
(``preferred_instance_key_pattern``).

The pattern is compiled when the job is added and matched here, in Python (``re.search``:
unanchored, case-sensitive), never in SQL: a claim passes the patterns this server's key
matches, and the database hands out jobs without a pattern or with one of those. Each
server keeps, per queue, the patterns waiting there that it has judged; a claim that comes
back short on a queue with patterned jobs, or a judgement older than
:data:`PATTERNS_MAX_AGE`, reads the queue's distinct patterns again (one index probe per
pattern, whatever the backlog). An anonymous server (no instance key) matches nothing: it
runs only jobs without a pattern, and cannot add one.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from qcore.errors import ConfigError, ValidationError

__all__ = [
    "MAX_PATTERN_LENGTH",
    "PATTERNS_MAX_AGE",
    "Affinity",
    "affinity_pattern",
    "key_matches",
    "notify_payload",
    "parse_notify_payload",
]

#: the longest pattern a job may carry
MAX_PATTERN_LENGTH = 1000
#: seconds a server trusts its judgement of a queue's patterns while its claims come back
#: full (a short claim reads them again at once)
PATTERNS_MAX_AGE = 5.0
#: patterns whose verdict a server remembers (forgotten all at once beyond that)
VERDICTS_KEPT = 100_000


def affinity_pattern(value: object, key: str | None) -> str:
    """A job's ``preferred_instance_key_pattern``, checked.

    It must be a string of 1 to 1,000 characters that compiles as a Python regular
    expression, added by a keyed server.
    """
    if key is None:
        raise ConfigError(
            "preferred_instance_key_pattern needs an instance key on this Boss (instance_key="
            " or $QCORE_INSTANCE_KEY): an anonymous server cannot add jobs with affinity"
        )
    if not isinstance(value, str) or not value:
        raise ValidationError(
            f"preferred_instance_key_pattern must be a non-empty string, got {value!r}"
        )
    if len(value) > MAX_PATTERN_LENGTH or "\x00" in value:
        raise ValidationError(
            f"preferred_instance_key_pattern must be at most {MAX_PATTERN_LENGTH} characters,"
            f" without NUL, got {value[:40]!r}..."
        )
    try:
        re.compile(value)
    except re.error as exc:
        raise ValidationError(
            f"preferred_instance_key_pattern {value!r} is not a valid regular expression: {exc}"
        ) from None
    return value


def key_matches(pattern: str, key: str) -> bool:
    """Whether an instance ``key`` matches a job's ``pattern`` as a claim judges it.

    Unanchored and case-sensitive (``re.search``); a pattern that does not compile
    (written by another client) matches nothing.
    """
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def notify_payload(queue: str, pattern: str) -> str:
    """The NOTIFY payload of a job with a pattern.

    It is JSON, so it never reads as a queue name (pg-boss listeners, which wake on a
    queue name, ignore it).
    """
    return json.dumps({"queue": queue, "pattern": pattern}, separators=(",", ":"))


def parse_notify_payload(payload: str) -> tuple[str, str | None]:
    """A NOTIFY payload as ``(queue, pattern)``.

    A plain queue name (pg-boss's payload) has no pattern.
    """
    if not payload.startswith("{"):
        return payload, None
    try:
        decoded = json.loads(payload)
        return str(decoded["queue"]), str(decoded["pattern"])
    except (ValueError, KeyError, TypeError):
        return payload, None


@dataclass
class _Judged:
    """The patterns waiting on one queue, as this server last read them."""

    matching: tuple[str, ...] = ()
    read_at: float = float("-inf")


@dataclass
class Affinity:
    """One server's side of affinity.

    Its key, what it has judged of each queue's patterns, and the jobs it has claimed
    since its registry last reported them.
    """

    #: this server's instance key (None: anonymous, matches no pattern)
    key: str | None = None
    #: whether the schema has qcore's affinity tables (an install pg-boss made that qcore
    #: never migrated has not: claims then ignore affinity, and patterns are refused)
    installed: bool = True
    #: jobs claimed by this server not yet added to its key's count
    claimed: int = 0
    #: where maintenance's walk through the attribution table goes on (queue, job id)
    sweep_after: tuple[str, Any] | None = None
    _queues: dict[str, _Judged] = field(default_factory=dict, repr=False)
    #: per queue, whether it had patterned jobs at this server's last claim there
    _patterned: dict[str, bool] = field(default_factory=dict, repr=False)
    _verdicts: dict[str, bool] = field(default_factory=dict, repr=False)

    def matches(self, pattern: str) -> bool:
        """Whether this server may run a job with ``pattern`` (never, when anonymous)."""
        if self.key is None:
            return False
        verdict = self._verdicts.get(pattern)
        if verdict is None:
            verdict = key_matches(pattern, self.key)
            if len(self._verdicts) >= VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[pattern] = verdict
        return verdict

    def matching(self, queue: str) -> list[str]:
        """The patterns of ``queue`` this server last found it matches."""
        judged = self._queues.get(queue)
        return list(judged.matching) if judged else []

    def stale(self, queue: str) -> bool:
        """Whether to read ``queue``'s patterns before claiming there.

        Yes when keyed, and never read, or read more than :data:`PATTERNS_MAX_AGE` ago
        while the queue had patterned jobs (a queue without any costs no reading).
        """
        if self.key is None:
            return False
        judged = self._queues.get(queue)
        if judged is None:
            return True
        return self.patterned(queue) and time.monotonic() - judged.read_at > PATTERNS_MAX_AGE

    def patterned(self, queue: str) -> bool:
        """Whether ``queue`` had patterned jobs at this server's last claim there.

        This is the claim's branch; a queue never claimed from is taken to have none.
        """
        return self._patterned.get(queue, False)

    def claimed_on(self, queue: str, *, patterned: bool, jobs: int) -> None:
        """A claim on ``queue`` took ``jobs`` and saw patterned jobs waiting or not."""
        self.claimed += jobs
        self._patterned[queue] = patterned

    def judge(self, queue: str, patterns: list[str]) -> bool:
        """Take ``queue``'s waiting patterns as just read; whether this server's matches changed.

        When the ones it matches changed, a claim then has jobs it could not take
        before.
        """
        matching = tuple(sorted(p for p in patterns if self.matches(p)))
        judged = self._queues.setdefault(queue, _Judged())
        changed = matching != judged.matching
        judged.matching, judged.read_at = matching, time.monotonic()
        return changed
