"""A server that pauses its own claiming while its process lacks CPU or memory.

``Boss(system_limiter={"cpu": 0.9, "memory": 0.85})`` samples this process every
``check_seconds`` against what its container allows (:mod:`qcore.services.process_usage`:
CPU as a share of the cores it may use, its resident memory as a share of the memory
limit). At or over a threshold its workers claim nothing (what they hold runs on);
once every share is under its resume threshold (lower, so it does not flap) they claim
again. The state is in the instance's row (``metrics.limitedBy``), on the board, and
told as ``instance_limited`` (a warning) and ``instance_unlimited`` events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from qcore.errors import ConfigError
from qcore.events import Events
from qcore.periodic import Periodic
from qcore.services.process_usage import ProcessUsage

__all__ = ["SystemLimiter", "SystemLimits", "usage_shares"]

#: how far under a pause threshold a share must fall before claiming resumes
RESUME_MARGIN = 0.1


@dataclass(frozen=True)
class SystemLimits:
    """The thresholds of :class:`SystemLimiter`, shares from 0 to 1 (None: not watched).

    ``cpu``: of the cores the process may use; ``memory``: its resident memory of the
    container's limit (the host's memory where there is none). Claiming resumes under
    ``resume_cpu`` / ``resume_memory`` (by default :data:`RESUME_MARGIN` lower).
    """

    cpu: float | None = 0.9
    memory: float | None = 0.9
    resume_cpu: float | None = None
    resume_memory: float | None = None
    check_seconds: float = 5.0

    def __post_init__(self) -> None:
        for name in ("cpu", "memory"):
            limit = getattr(self, name)
            _share(f"system_limiter {name}", limit)
            resume = getattr(self, f"resume_{name}")
            if resume is None and limit is not None:
                object.__setattr__(self, f"resume_{name}", max(0.0, limit - RESUME_MARGIN))
            elif resume is not None:
                _share(f"system_limiter resume_{name}", resume)
                if limit is None or resume > limit:
                    raise ConfigError(
                        f"system_limiter resume_{name} must be at most {name}"
                        f" ({limit!r}), got {resume!r}"
                    )
        if self.cpu is None and self.memory is None:
            raise ConfigError("system_limiter watches nothing: give cpu or memory")
        seconds = self.check_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 1:
            raise ConfigError(
                f"system_limiter check_seconds must be a number of at least 1, got {seconds!r}"
            )

    @classmethod
    def of(cls, value: SystemLimits | Mapping[str, Any] | None) -> SystemLimits | None:
        """The limits a ``Boss`` option gives: these, a mapping of their fields, or None."""
        if value is None or isinstance(value, SystemLimits):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"system_limiter must be a mapping (cpu, memory, resume_cpu, resume_memory,"
                f" check_seconds) or SystemLimits, got {value!r}"
            )
        try:
            return cls(**value)
        except TypeError:
            allowed = "cpu, memory, resume_cpu, resume_memory, check_seconds"
            raise ConfigError(
                f"system_limiter takes {allowed}; got {', '.join(map(str, value))}"
            ) from None


def _share(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{name} must be a share above 0 and at most 1, got {value!r}")


def usage_shares(sample: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """A usage sample's CPU and memory as shares of what the process may use.

    CPU: cores used over the cores allowed (None on a first sample); memory: the
    process's resident memory over the limit.
    """
    cpu, cores = sample.get("cpu"), sample.get("cpuLimit")
    rss, limit = sample.get("rss"), sample.get("memoryLimit")
    cpu_share = cpu / cores if cpu is not None and cores else None
    memory_share = rss / limit if rss is not None and limit else None
    return cpu_share, memory_share


class SystemLimiter(Periodic):
    """Samples this process every ``check_seconds`` and limits its claiming by ``limits``.

    ``on_limited(reason)`` is told each change (None: claiming again). ``usage`` is
    the sampler (a :class:`~qcore.services.process_usage.ProcessUsage` by default).
    """

    name = "limiter"

    def __init__(
        self,
        events: Events,
        limits: SystemLimits,
        *,
        on_limited: Callable[[str | None], None],
        usage: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(events, float(limits.check_seconds), at_start=True)
        self.limits = limits
        self._on_limited = on_limited
        self.usage = usage if usage is not None else ProcessUsage().sample
        #: why claiming is limited now (None: it is not)
        self.reason: str | None = None

    async def run_pass(self) -> None:
        self.check(self.usage())

    def check(self, sample: Mapping[str, Any]) -> None:
        """Judge one sample: limit, keep limiting, or claim again."""
        cpu, memory = usage_shares(sample)
        limits = self.limits
        over = []
        if cpu is not None and limits.cpu is not None and cpu >= limits.cpu:
            over.append(f"CPU {cpu:.0%} of {sample.get('cpuLimit'):g} cores")
        if memory is not None and limits.memory is not None and memory >= limits.memory:
            over.append(f"memory {memory:.0%} of its limit")
        if over:
            self._limit(", ".join(over), cpu, memory)
        elif (
            self.reason is not None
            and _under(cpu, limits.resume_cpu)
            and _under(memory, limits.resume_memory)
        ):
            self._limit(None, cpu, memory)

    def _limit(self, reason: str | None, cpu: float | None, memory: float | None) -> None:
        if (reason is None) == (self.reason is None):
            self.reason = reason
            return  # no change of state (the reason's figures may move)
        self.reason = reason
        self._on_limited(reason)
        assert self.events is not None
        shares = {"cpu": cpu, "memory": memory}
        if reason is not None:
            self.events.emit("instance_limited", {"reason": reason, **shares})
            self.events.warn(
                "instance_limited",
                f"this server claims nothing while its process is short of resources: {reason}",
                **shares,
            )
        else:
            self.events.emit("instance_unlimited", shares)


def _under(share: float | None, resume: float | None) -> bool:
    return share is None or resume is None or share < resume
