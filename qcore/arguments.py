"""A verb refuses an argument it does not take the way it refuses a bad value.

It raises a :class:`~qcore.errors.ValidationError` naming the argument and what the verb
takes, never Python's ``TypeError``.

The rule of the whole API: a bad argument value or an unknown option of a verb is a
``ValidationError`` (a ``ValueError``); a bad constructor option or environment is a
``ConfigError``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from qcore.errors import ConfigError, ValidationError

__all__ = ["constructor", "verb"]

F = TypeVar("F", bound=Callable[..., Any])


def _option_keys(options: tuple[Any, ...]) -> frozenset[str]:
    """Every key of the ``options`` TypedDicts a ``**options`` parameter takes."""
    return frozenset().union(
        *(frozenset(o.__required_keys__) | frozenset(o.__optional_keys__) for o in options)
    )


def verb(*options: Any) -> Callable[[F], F]:
    """Wrap a verb of ``Boss`` so that unknown keyword arguments raise ``ValidationError``.

    The verb is an ``async def``, or a plain method; unknown arguments are those beyond
    its named parameters and the keys of the ``options`` TypedDicts its ``**options``
    takes. Costs nothing on a good call of an ``async def``: Python binds the arguments
    when the coroutine is created, so only that step is watched.
    """

    def decorate(method: F) -> F:
        parameters = list(inspect.signature(method).parameters.values())[1:]
        named = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        allowed = frozenset(named) | _option_keys(options)
        takes = ", ".join(sorted(allowed))

        def refuse(why: str) -> ValidationError:
            return ValidationError(f"{method.__name__}(): {why}; it takes: {takes}")

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if options:
                unknown = kwargs.keys() - allowed
                if unknown:
                    raise refuse(f"unknown option {', '.join(sorted(unknown))}")
            try:
                return method(self, *args, **kwargs)
            except TypeError as exc:  # arguments that do not bind: too many, unknown
                raise refuse(str(exc).split("() ", 1)[-1]) from None  # "got an unexpected ..."

        if not inspect.iscoroutinefunction(method):
            # a plain method runs its body at once: bind the arguments first, so a
            # TypeError of the body is not taken for one of the call
            signature = inspect.signature(method)

            @functools.wraps(method)
            def call_now(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    signature.bind(self, *args, **kwargs)
                except TypeError as exc:
                    raise refuse(str(exc)) from None
                return method(self, *args, **kwargs)

            return call_now  # type: ignore[return-value]
        return call  # type: ignore[return-value]

    return decorate


Init = TypeVar("Init", bound=Callable[..., None])


def constructor(*options: Any) -> Callable[[Init], Init]:
    """Wrap an ``__init__`` so that arguments it does not take raise ``ConfigError``.

    Those are arguments beyond its named parameters and the keys of the ``options``
    TypedDicts its ``**options`` takes: a bad constructor option, named with what it
    takes, not ``TypeError``.
    """

    def decorate(init: Init) -> Init:
        signature = inspect.signature(init)
        parameters = list(signature.parameters.values())[1:]
        named = [p.name for p in parameters if p.kind != p.VAR_KEYWORD]
        extra = _option_keys(options)
        known = frozenset(named) | extra
        takes = ", ".join(named + sorted(extra))

        def refuse(why: str, instance: Any) -> ConfigError:
            return ConfigError(f"{type(instance).__name__}(): {why}; it takes: {takes}")

        @functools.wraps(init)
        def call(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                signature.bind(self, *args, **kwargs)
            except TypeError as exc:
                raise refuse(str(exc).split("() ", 1)[-1], self) from None
            unknown = sorted(kwargs.keys() - known) if options else []
            if unknown:
                raise refuse(f"got an unexpected keyword argument {unknown[0]!r}", self)
            init(self, *args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate
