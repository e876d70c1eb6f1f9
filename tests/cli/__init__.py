"""Running the ``qcore`` command in a subprocess for the CLI tests: an environment
without any database setting but those a test gives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from qcore.cli.connection import LIBPQ_VARIABLES

__all__ = ["run_qcore"]


def run_qcore(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m qcore ARGS``, its output captured, in ``cwd`` (the tests' folder)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("QCORE_DATABASE_URL", "DATABASE_URL", *LIBPQ_VARIABLES)
    }
    return subprocess.run(
        [sys.executable, "-m", "qcore", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        cwd=cwd or Path(__file__).parent.parent,
        check=False,
    )
