"""The compatibility matrix: provisioners, the capability guard, the pytest plugin,
the runner and the table generator.

``from matrix import requires, feature`` gives the test markers (see
:mod:`matrix.markers`); they are loaded on first use so that importing
``matrix.guard`` or ``matrix.provisioners`` does not import pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the markers' types, without importing pytest at run time
    from matrix.markers import feature, requires

__all__ = ["feature", "requires"]


def __getattr__(name: str) -> Any:
    if name in ("requires", "feature"):
        from matrix import markers

        return getattr(markers, name)
    raise AttributeError(f"module 'matrix' has no attribute {name!r}")
