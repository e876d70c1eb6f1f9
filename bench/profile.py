"""``python -m bench profile SCENARIO``: the qcore half of one scenario under a profiler.

The scenario is prepared as in a run (fresh schema, same jobs), then its qcore
half runs in this process on a counting adapter, so besides the profile the
output says how many statements and transactions each job cost. Not a
measurement: the profiler and the counting slow everything down.

    python -m bench profile batch_drain [--jobs N] [--backend NAME]
                            [--tool cprofile|pyinstrument] [--top K]
"""

from __future__ import annotations

import asyncio
import cProfile
import importlib
import io
import pstats
from collections import Counter
from typing import Any

from bench import common
from bench.env import fresh_schema
from bench.runner import BY_NAME, IDLE_WORKERS, _queues
from qcore import backends
from qcore.backend import FetchStrategy

__all__ = ["profile"]


async def _run(
    dsn: str, backend: str, scenario_name: str, jobs: int, tool: str
) -> tuple[dict[str, Any], str]:
    scenario = BY_NAME[scenario_name]
    skip_locked = backends.get(backend).fetch is FetchStrategy.SKIP_LOCKED
    module = importlib.import_module(scenario.module)
    entry_module, _, entry_name = scenario.qcore_entry.partition(":")
    function = getattr(importlib.import_module(entry_module), entry_name)
    async with fresh_schema(dsn, backend, _queues(scenario)) as env:
        await module.prepare(env, jobs, [])
        spec = env.spec(
            jobs=jobs,
            concurrency=scenario.concurrency,
            batch=scenario.batch,
            skip_locked=skip_locked,
            samples=max(10, jobs // 40),
            workers=IDLE_WORKERS,
            seconds=10.0,
            count=True,
        )
        if tool == "pyinstrument":
            from pyinstrument import Profiler

            profiler = Profiler(async_mode="enabled")
            profiler.start()
            try:
                result = await function(spec)
            finally:
                profiler.stop()
            text = profiler.output_text(unicode=True, color=False, show_all=False)
        else:
            prof = cProfile.Profile()
            prof.enable()
            try:
                result = await function(spec)
            finally:
                prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(45)
            out.write("\n--- by cumulative time ---\n")
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(60)
            out.write("\n--- callers of the top functions ---\n")
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_callers(12)
            text = out.getvalue()
        counted = list(common.COUNTED)
        common.COUNTED.clear()
        result["statements"] = sum(c.statements for c in counted)
        result["transactions"] = sum(c.transactions for c in counted)
        kinds: Counter[str] = Counter()
        rows: Counter[str] = Counter()
        for c in counted:
            kinds.update(c.kinds)
            rows.update(c.rows)
        result["statements_by_kind"] = {k: (n, rows[k]) for k, n in kinds.most_common()}
        for c in counted:
            await c.close()
    return result, text


def profile(dsn: str, backend: str, scenario: str, jobs: int, tool: str) -> str:
    result, text = asyncio.run(_run(dsn, backend, scenario, jobs, tool))
    handled = max(1, int(result.get("jobs", 0)))
    head = [
        f"profile of {scenario} (qcore half), backend {backend}, {jobs:,} jobs, tool {tool}",
        f"result: {result}",
        f"statements per job: {result['statements'] / handled:.3f};"
        f" transactions per job: {result['transactions'] / handled:.3f}",
        *(
            f"  {kind}: {n} statements, {r} rows back ({r / n if n else 0:.1f} per statement)"
            for kind, (n, r) in result["statements_by_kind"].items()
        ),
        "",
    ]
    return "\n".join(head) + text
