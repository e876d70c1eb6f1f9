"""Numbers, flags and option names: the checks every other options module builds on.

Each raises :class:`qcore.errors.ValidationError` naming the value and what is allowed,
but :func:`check_number`, which checks a ``Boss`` setting and raises
:class:`qcore.errors.ConfigError`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any, Final

from qcore.errors import ConfigError, ValidationError

__all__ = [
    "INT4_MAX",
    "INT4_MIN",
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "check_count",
    "check_flag",
    "check_int",
    "check_number",
    "check_seconds",
    "known_only",
]

INT4_MAX: Final = 2**31 - 1
INT4_MIN: Final = -(2**31)
#: the most rows one page of a list read returns, and what it returns when not told
#: (pg-boss's LIST_LIMIT_MAX and LIST_LIMIT_DEFAULT)
LIST_LIMIT_MAX: Final = 100_000
LIST_LIMIT_DEFAULT: Final = 1000


def check_int(name: str, value: object, *, minimum: int = 0, maximum: int = INT4_MAX) -> int:
    """An integer option from ``minimum`` to ``maximum`` (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer, got {value!r}")
    if value < minimum or value > maximum:
        if maximum == INT4_MAX and minimum != INT4_MIN:
            raise ValidationError(f"{name} must be an integer >= {minimum}, got {value}")
        raise ValidationError(f"{name} must be an integer from {minimum} to {maximum}, got {value}")
    return value


def check_flag(name: str, value: object) -> bool:
    """A flag option: True or False (not 0, 1 or None)."""
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be True or False, got {value!r}")
    return value


def check_seconds(name: str, value: object, minimum: float, *, inclusive: bool = True) -> float:
    """Check a duration option: a finite number of seconds >= ``minimum``.

    With ``inclusive=False``, > ``minimum``.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value >= minimum if inclusive else value > minimum):  # type: ignore[operator]
        return float(value)  # type: ignore[arg-type]
    bound = f">= {minimum}" if inclusive else f"> {minimum}"
    raise ValidationError(f"{name} must be a number of seconds {bound}, got {value!r}")


def check_count(name: str, value: object, maximum: int) -> int:
    """A count option: an integer from 1 to ``maximum``."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum:
        return value
    raise ValidationError(f"{name} must be an integer from 1 to {maximum}, got {value!r}")


def check_number(option: str, value: Any, low: float, high: float, *, integer: bool) -> None:
    """``ConfigError`` unless ``value`` is a number (``integer``: an int) in [low, high]."""
    kind = "an integer" if integer else "a number"
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if not ok or not low <= value <= high:
        raise ConfigError(f"{option} must be {kind} from {low:g} to {high:g}, got {value!r}")


def known_only(kind: str, options: Iterable[str], known: Collection[str]) -> None:
    """``ValidationError`` naming the ``kind`` options given that are not ``known``."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValidationError(
            f"unknown {kind} option {', '.join(unknown)}; known: {', '.join(known)}"
        )
