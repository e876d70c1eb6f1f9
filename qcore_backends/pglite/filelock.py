"""An exclusive file lock shared between processes (fcntl, or msvcrt on Windows).

The PGlite server takes one while it installs its npm packages and holds one on its
data directory while it runs, so two processes never do either at once.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from qcore.errors import ConfigError

__all__ = ["acquire", "file_lock", "release"]


@contextlib.contextmanager
def file_lock(path: Path, *, timeout: float | None, what: str) -> Iterator[None]:
    """An exclusive lock on ``path`` shared with other processes.

    It blocks up to ``timeout`` seconds; ``timeout=0`` fails at once if it is held.
    """
    handle = acquire(path, timeout=timeout, what=what)
    try:
        yield
    finally:
        release(handle)


def acquire(path: Path, *, timeout: float | None, what: str) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")  # noqa: SIM115 - held until release
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            _lock_nowait(handle)
            return handle
        except OSError:
            if deadline is not None and time.monotonic() >= deadline:
                handle.close()
                raise ConfigError(f"{what}: {path} is locked by another process") from None
            time.sleep(0.1)


def release(handle: IO[bytes]) -> None:
    try:
        _unlock(handle)
    finally:
        handle.close()


if sys.platform == "win32":
    import msvcrt

    def _lock_nowait(handle: IO[bytes]) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock(handle: IO[bytes]) -> None:
        handle.seek(0)
        with contextlib.suppress(OSError):
            msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock_nowait(handle: IO[bytes]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock(handle: IO[bytes]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
