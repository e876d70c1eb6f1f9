"""qcore's conformance kit: the backend-neutral test suite a backend must pass, the
pytest plugin that runs it once per backend, and the compatibility table it writes.

It is loaded only when asked for (``pip install 'qcore-queue[conformance]'`` for its test
tools)::

    pytest -p qcore.conformance --backend foo [--dsn postgresql://...]
    python -m qcore.conformance run --backends foo [--dsn postgresql://...]

The first runs the suite (:data:`SUITE`) on backend ``foo`` when no test paths are
given, or the given tests with the kit's fixtures (``backend``, ``provisioned``,
``db``, ``schema``, ``ctx``, ``boss``) and markers (:mod:`qcore.conformance.markers`).
The second runs it in a pytest process per backend and writes each backend's results
and the compatibility table. Importing this package imports no test tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SUITE"]

#: the directory of the conformance suite's test modules
SUITE = Path(__file__).resolve().parent / "suite"

# the fixtures, options and markers come with this plugin
pytest_plugins = ["qcore.conformance.plugin"]


def pytest_configure(config: Any) -> None:
    """With no test paths on the command line, collect the conformance suite (not the
    current project's tests)."""
    import pytest

    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        config.args = [str(SUITE)]
