"""The markers the compatibility matrix reads, for import by test modules.

>>> from qcore.conformance.markers import feature, requires
>>> pytestmark = feature("queues")
>>> @requires("listen_notify")
... async def test_notify(db): ...

``requires(name, ...)``: the test needs these capabilities (names from
``Backend.features()``); on a backend without one it is skipped with a reason
naming the backend and the capability. An unknown name is a collection error.

``feature(name)``: the feature group (a row of the compatibility table) the
test belongs to; tests without one are in the group ``other``.
"""

from __future__ import annotations

import pytest

__all__ = ["DEFAULT_FEATURE", "feature", "requires"]

#: the group of tests that declare none
DEFAULT_FEATURE = "other"

requires = pytest.mark.requires
feature = pytest.mark.feature
