"""The child process that runs the timed half of one scenario run.

``python -m bench.child`` reads a JSON spec on stdin — ``entry`` names the
coroutine (``"bench.drain:worker_drain"``) — runs it on a fresh event loop
and prints one JSON object on stdout: the entry's result plus the process's
peak RSS and CPU time. A part of qcore that is still a scaffold (raises
``NotImplementedError``) is reported as ``{"unavailable": why}``, not as a
failure. Each run gets a process of its own, so the memory figure is that
of one worker process and nothing carries over between runs.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import traceback
from typing import Any

from bench.common import peak_rss_mib

__all__ = ["main", "unavailable_reason"]


def unavailable_reason(exc: NotImplementedError) -> str:
    """Which scaffold raised, from the innermost frame of the traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = frame.filename.replace(os.sep, "/")
        if "/qcore/" in path:
            where = "qcore/" + path.rsplit("/qcore/", 1)[1]
            return f"not implemented yet ({where}, {frame.name} raises NotImplementedError)"
    return f"not implemented yet: {exc}"


def main() -> int:
    spec: dict[str, Any] = json.loads(sys.stdin.read())
    module_name, _, function_name = spec["entry"].partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    times0 = os.times()
    try:
        result: dict[str, Any] = asyncio.run(function(spec))
    except NotImplementedError as exc:
        result = {"unavailable": unavailable_reason(exc)}
    times1 = os.times()
    result["peak_rss_mib"] = peak_rss_mib()
    result["cpu_seconds"] = (times1.user - times0.user) + (times1.system - times0.system)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
