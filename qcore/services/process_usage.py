"""What this process uses, against what its container allows.

These are the ``metrics`` of its instance row, sampled on each heartbeat.

Limits come from the cgroup the process is charged to (``/proc/self/cgroup``), v2
(``cpu.max``, ``memory.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
``memory.limit_in_bytes``), the tightest of the cgroup and its parents (a pod's limit
sits on a parent). Off Linux, or where the files cannot be read, the limits are the
host's (psutil) and the container-only figures are None. Rates cover the time since
the previous sample, so the first sample has none. The keys are pg-boss's; ``heapUsed``
and ``heapLimit`` (V8's heap) have no Python counterpart and are always None, and
``loopUtilization`` is None too (asyncio does not measure it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = ["Cgroup", "LoopLag", "ProcessUsage", "find_cgroup"]

#: cgroup v1 writes "no limit" as the largest page-aligned int64
_V1_UNLIMITED = 2**63 - 4096


@dataclass(frozen=True)
class Cgroup:
    """The cgroup this process is charged to.

    Its version, and for each controller the directories from the process's own cgroup
    up to the hierarchy's root.
    """

    version: int
    cpu: tuple[Path, ...]
    memory: tuple[Path, ...]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _stat_field(text: str | None, name: str) -> int | None:
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return None


def _up_to_root(mount: Path, path: str) -> tuple[Path, ...]:
    """``mount/path`` and each parent directory down to ``mount``, where they exist.

    A private cgroup namespace shows ``/``; the host's, the full path.
    """
    parts = [p for p in path.split("/") if p and p != ".."]
    dirs = [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
    return tuple(d for d in dirs if d.is_dir())


def find_cgroup(root: Path = Path("/")) -> Cgroup | None:
    """The cgroup of this process as ``root`` shows it.

    ``root`` is ``/`` in production, a fixture tree in tests. v1 where the cpu or memory
    controller is on v1, else v2; None when ``/proc/self/cgroup`` cannot be read.
    """
    text = _read(root / "proc/self/cgroup")
    if text is None:
        return None
    mounts = root / "sys/fs/cgroup"
    unified: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            unified = path
        for controller in controllers.split(","):
            if controller:
                v1[controller] = path
    if "cpu" in v1 or "memory" in v1:

        def dirs(controller: str) -> tuple[Path, ...]:
            if controller not in v1:
                return ()
            for name in (controller, "cpu,cpuacct"):
                if (mounts / name).is_dir():
                    return _up_to_root(mounts / name, v1[controller])
            return ()

        return Cgroup(1, dirs("cpu"), dirs("memory"))
    if unified is not None:
        found = _up_to_root(mounts, unified)
        return Cgroup(2, found, found)
    return None


def cpu_quota(cgroup: Cgroup) -> tuple[float, Path] | None:
    """The tightest CPU quota in cores on the cgroup or a parent, and where it is set."""
    best: tuple[float, Path] | None = None
    for directory in cgroup.cpu:
        cores: float | None = None
        if cgroup.version == 2:
            quota, _, period = (_read(directory / "cpu.max") or "max").partition(" ")
            if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
                cores = int(quota) / int(period)
        else:
            quota_text = _read(directory / "cpu.cfs_quota_us")
            period_text = _read(directory / "cpu.cfs_period_us")
            if quota_text and period_text and quota_text.lstrip("-").isdigit():
                quota_us, period_us = int(quota_text), int(period_text)
                if quota_us > 0 and period_us > 0:
                    cores = quota_us / period_us
        if cores is not None and (best is None or cores < best[0]):
            best = (cores, directory)
    return best


def memory_limit(cgroup: Cgroup) -> tuple[int, Path] | None:
    """The tightest memory limit in bytes on the cgroup or a parent, and where it is set."""
    best: tuple[int, Path] | None = None
    name = "memory.max" if cgroup.version == 2 else "memory.limit_in_bytes"
    for directory in cgroup.memory:
        text = _read(directory / name)
        if text is None or not text.isdigit():
            continue  # "max", or unreadable
        limit = int(text)
        if cgroup.version == 1 and limit >= _V1_UNLIMITED:
            continue
        if best is None or limit < best[0]:
            best = (limit, directory)
    return best


def working_set(cgroup: Cgroup, directory: Path) -> int | None:
    """Memory in use less inactive file cache, as container runtimes count it."""
    v2 = cgroup.version == 2
    usage = _read(directory / ("memory.current" if v2 else "memory.usage_in_bytes"))
    if usage is None or not usage.isdigit():
        return None
    stat = _read(directory / "memory.stat")
    inactive = _stat_field(stat, "inactive_file" if v2 else "total_inactive_file") or 0
    return max(0, int(usage) - inactive)


def _allowed_cpus() -> int:
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return psutil.cpu_count() or 1


class LoopLag:
    """The event loop's delay, measured by a task that records how late it wakes.

    The task sleeps ``interval``; ``take()`` returns (p99, max) in milliseconds since
    the last take.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="qcore-loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            self._lags.append(max(0.0, loop.time() - due) * 1000)
            del self._lags[:-1000]  # a bounded window between takes

    def take(self) -> tuple[float | None, float | None]:
        lags, self._lags = sorted(self._lags), []
        if not lags:
            return None, None
        p99 = lags[min(len(lags) - 1, math.ceil(len(lags) * 0.99) - 1)]
        return round(p99, 1), round(lags[-1], 1)


class ProcessUsage:
    """Samples of this process's usage, against its container's limits.

    Samples come from :meth:`sample`; the limits are read under ``root``.
    """

    def __init__(self, root: Path = Path("/"), lag: LoopLag | None = None) -> None:
        self._root = root
        self._cgroup = find_cgroup(root)
        self._process = psutil.Process()
        self._lag = lag
        self._cpu: tuple[float, float] | None = None  # (wall, cpu seconds) at the last sample
        self._throttle: tuple[Path, int, int] | None = None

    def sample(self) -> dict[str, Any]:
        """One sample, in pg-boss's ``metrics`` shape."""
        wall = time.monotonic()
        times = self._process.cpu_times()
        used = times.user + times.system
        cpu = None
        if self._cpu is not None and wall > self._cpu[0]:
            cpu = round((used - self._cpu[1]) / (wall - self._cpu[0]), 3)
        self._cpu = (wall, used)
        cg = self._cgroup
        quota = cpu_quota(cg) if cg else None
        memory = memory_limit(cg) if cg else None
        cpus = _allowed_cpus()
        delay, delay_max = self._lag.take() if self._lag is not None else (None, None)
        return {
            "cgroup": cg.version if cg else None,
            "cpu": cpu,
            "cpuLimit": round(min(quota[0], cpus) if quota else cpus, 3),
            "cpuThrottled": self._throttled(quota[1]) if quota else None,
            "rss": self._process.memory_info().rss,
            "heapUsed": None,
            "heapLimit": None,
            "memoryUsed": working_set(cg, memory[1]) if cg and memory else None,
            "memoryLimit": memory[0] if memory else psutil.virtual_memory().total,
            "loopDelay": delay,
            "loopDelayMax": delay_max,
            "loopUtilization": None,
        }

    def _throttled(self, directory: Path) -> float | None:
        """The share of CPU periods since the last sample in which the cgroup was throttled.

        The cgroup is the one holding the quota; None on the first sample or when the
        quota moved.
        """
        text = _read(directory / "cpu.stat")
        periods, throttled = _stat_field(text, "nr_periods"), _stat_field(text, "nr_throttled")
        if periods is None or throttled is None:
            return None
        previous, self._throttle = self._throttle, (directory, periods, throttled)
        if previous is None or previous[0] != directory:
            return None
        elapsed = periods - previous[1]
        return round((throttled - previous[2]) / elapsed, 3) if elapsed > 0 else 0.0
