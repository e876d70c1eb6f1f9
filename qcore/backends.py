"""The backend registry: find a backend by name.

Lookup order is fixed: backends registered in this process (tests, apps
that build one at run time), then the ``qcore.backends`` entry-point group,
where the built-ins and every vendor package register. Results are cached.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from qcore.backend import Backend, EngineIdentity
from qcore.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "for_engine", "get", "names", "register", "unregister"]

ENTRY_POINT_GROUP = "qcore.backends"

_registered: dict[str, Callable[[], Backend]] = {}
_cache: dict[str, Backend] = {}
_lock = threading.Lock()


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """Names of every backend that can be resolved here, sorted."""
    return sorted(set(_registered) | set(_entry_points()))


def register(name: str, backend: Backend | Callable[[], Backend]) -> None:
    """Make a backend resolvable by name in this process (overrides an entry point)."""
    with _lock:
        _registered[name] = backend if callable(backend) else (lambda: backend)
        _cache.pop(name, None)


def unregister(name: str) -> None:
    """Undo :func:`register`."""
    with _lock:
        _registered.pop(name, None)
        _cache.pop(name, None)


def get(name: str | Backend) -> Backend:
    """The backend registered under ``name``; a ``Backend`` is returned as it is."""
    if isinstance(name, Backend):
        return name
    with _lock:
        if name in _cache:
            return _cache[name]
        loader = _registered.get(name)
    if loader is not None:
        backend = loader()
    else:
        ep = _entry_points().get(name)
        if ep is None:
            raise ConfigError(
                f"unknown backend {name!r}; installed backends: {', '.join(names()) or 'none'}"
                f" (a backend registers in the {ENTRY_POINT_GROUP!r} entry-point group)"
            )
        try:
            loaded = ep.load()
        except Exception as exc:
            raise ConfigError(
                f"backend {name!r} could not be loaded from {ENTRY_POINT_GROUP}:{ep.value}: {exc}"
            ) from exc
        backend = loaded() if callable(loaded) and not isinstance(loaded, Backend) else loaded
    if not isinstance(backend, Backend):
        raise ConfigError(
            f"{ENTRY_POINT_GROUP}:{name} gave {type(backend).__name__}, not a qcore Backend"
        )
    if backend.name != name:
        raise ConfigError(f"backend registered as {name!r} calls itself {backend.name!r}")
    with _lock:
        _cache[name] = backend
    return backend


def for_engine(identity: EngineIdentity) -> Backend:
    """The installed backend whose engine the server of ``identity`` is.

    A backend with its own ``detect`` that recognises it comes first (a vendor's engine
    may speak like one of the built-ins), else the backend named as the engine (or as
    the engine an emulation stands in for). ``ConfigError`` when none or several claim
    it.
    """
    detected = []
    for name in names():
        try:
            backend = get(name)
        except ConfigError:  # a broken vendor package cannot claim the server
            continue
        if backend.detect is not None and backend.recognises(identity):
            detected.append(backend)
    if len(detected) > 1:
        raise ConfigError(
            f"several backends recognise {identity.describe()}:"
            f" {', '.join(b.name for b in detected)}; name one with backend="
        )
    if detected:
        return detected[0]
    wanted = identity.emulating or identity.engine
    if wanted in names():
        return get(wanted)
    raise ConfigError(
        f"no installed backend is for {identity.describe()}; installed backends:"
        f" {', '.join(names()) or 'none'}; name one with backend="
    )
