"""The container limits of an instance's ``metrics``, read from cgroup trees laid out as
fixture files (v2, v1, a tighter limit on a parent, no limit, no cgroup at all), and a
sample of the running process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
import pytest

from qcore.services.process_usage import (
    LoopLag,
    ProcessUsage,
    cpu_quota,
    find_cgroup,
    memory_limit,
    working_set,
)

pytestmark = pytest.mark.feature("instances")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cgroup_v2_with_a_tighter_limit_on_the_parent(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/kubepods/pod1/app\n",
            "sys/fs/cgroup/kubepods/pod1/cpu.max": "150000 100000\n",
            "sys/fs/cgroup/kubepods/pod1/memory.max": "536870912\n",
            "sys/fs/cgroup/kubepods/pod1/app/cpu.max": "max 100000\n",
            "sys/fs/cgroup/kubepods/pod1/app/memory.max": "1073741824\n",
            "sys/fs/cgroup/kubepods/pod1/memory.current": "300000000\n",
            "sys/fs/cgroup/kubepods/pod1/memory.stat": "anon 1\ninactive_file 100000000\n",
        },
    )
    cg = find_cgroup(root)
    assert cg is not None and cg.version == 2
    quota = cpu_quota(cg)
    assert quota is not None and quota[0] == 1.5 and quota[1].name == "pod1"
    memory = memory_limit(cg)
    assert memory is not None and memory[0] == 536_870_912 and memory[1].name == "pod1"
    assert working_set(cg, memory[1]) == 200_000_000


def test_cgroup_v2_without_limits(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/cpu.max": "max 100000\n",
            "sys/fs/cgroup/memory.max": "max\n",
        },
    )
    cg = find_cgroup(root)
    assert cg is not None and cg.version == 2
    assert cpu_quota(cg) is None and memory_limit(cg) is None


def test_cgroup_v1_quota_and_the_unlimited_value(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "9223372036854771712\n",
            "sys/fs/cgroup/memory/docker/memory.limit_in_bytes": "268435456\n",
            "sys/fs/cgroup/memory/docker/memory.usage_in_bytes": "100000000\n",
            "sys/fs/cgroup/memory/docker/memory.stat": "total_inactive_file 40000000\n",
        },
    )
    cg = find_cgroup(root)
    assert cg is not None and cg.version == 1
    quota = cpu_quota(cg)
    assert quota is not None and quota[0] == 0.5
    memory = memory_limit(cg)
    assert memory is not None and memory[0] == 268_435_456 and memory[1].name == "docker"
    assert working_set(cg, memory[1]) == 60_000_000


def test_no_cgroup_falls_back_to_the_host(tmp_path: Path) -> None:
    assert find_cgroup(tmp_path) is None
    sample = ProcessUsage(root=tmp_path).sample()
    assert sample["cgroup"] is None and sample["cpuThrottled"] is None
    assert sample["memoryLimit"] == psutil.virtual_memory().total
    assert sample["memoryUsed"] is None and sample["cpu"] is None  # no rate on the first


def test_throttling_is_a_share_of_the_periods_since_the_last_sample(tmp_path: Path) -> None:
    files = {
        "proc/self/cgroup": "0::/app\n",
        "sys/fs/cgroup/app/cpu.max": "100000 100000\n",
        "sys/fs/cgroup/app/cpu.stat": "nr_periods 100\nnr_throttled 10\n",
    }
    root = _tree(tmp_path, files)
    usage = ProcessUsage(root=root)
    first = usage.sample()
    assert first["cgroup"] == 2 and first["cpuThrottled"] is None
    assert first["cpuLimit"] <= 1.0
    (root / "sys/fs/cgroup/app/cpu.stat").write_text("nr_periods 200\nnr_throttled 35\n")
    second = usage.sample()
    assert second["cpuThrottled"] == 0.25 and second["cpu"] is not None


async def test_loop_lag_records_a_blocked_loop() -> None:
    lag = LoopLag(interval=0.05)
    lag.start()
    try:
        await asyncio.sleep(0.2)
        time.sleep(0.3)  # noqa: ASYNC251 (blocking the loop is the point: it wakes late)
        await asyncio.sleep(0.2)
        p99, worst = lag.take()
        assert worst is not None and worst >= 200
        assert p99 is not None and p99 <= worst
        assert lag.take() == (None, None)  # the window starts again
    finally:
        await lag.stop()
