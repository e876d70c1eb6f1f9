"""``python -m matrix``: the conformance kit's command with this repository's defaults:
the whole suite (``tests/`` and the conformance suite), ``matrix/results/`` and
``docs/compatibility.md``.

python -m matrix run [--backends a,b|all] [--dsn DSN] [--tests PATH ...] [--pytest-args ...]
python -m matrix table
"""

from __future__ import annotations

import sys
from pathlib import Path

from qcore.conformance import SUITE
from qcore.conformance.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = (
    [ROOT / "tests", SUITE],
    ROOT / "matrix" / "results",
    ROOT / "docs" / "compatibility.md",
)

if __name__ == "__main__":
    sys.exit(main(prog="python -m matrix", defaults=DEFAULTS))
