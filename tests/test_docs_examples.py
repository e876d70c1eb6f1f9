"""The ```python blocks of the documentation run against a real server, page by page.

Every page under ``docs/`` with a ```python block is one test. The page gets a database
of its own on the local PostgreSQL (so ``Boss(url)`` with the default schema, and any
schema a page names, starts empty); every connection string written in a block
(``postgresql://...``) is pointed at that database, ``url`` and ``$DATABASE_URL`` name
it too. The blocks run in order in one namespace, so a later block builds on the names
an earlier one left; top-level ``await`` is allowed. As the guide says of its examples
(docs/index.md), the namespace starts with ``boss``, a started ``Boss`` on that
database, and ``asyncio``, ``os``, ``Boss`` and ``SyncBoss`` imported. A block with no
top-level ``await`` runs in a thread of its own, so it may call ``asyncio.run()`` or use
``SyncBoss`` as a script would. Whatever ``Boss`` a page leaves running is stopped.

A block that cannot run here (it needs a Django project, a Redis server, a second host,
or is a fragment by design) carries an HTML comment just above its fence::

    <!-- docs-test: skip (needs a Django project) -->

and is reported as skipped with that reason (``test_docs_block_skipped``, one per
block); every other block must run. A block that raises, or runs longer than
``BLOCK_TIMEOUT`` seconds, fails the page's test naming the block's line.

The public API's docstrings hold no doctest to run: their few ``>>>`` lines
(``qcore.metrics``, ``Boss.handler``, the conformance kit's markers and provisioners)
are sketches that name a ``ctx``, a ``boss`` or a server from the surrounding text, not
self-contained examples. ``test_docstring_examples_are_sketches`` keeps that true: a
module that grows real doctests (with expected output) must be added here to run.
"""

from __future__ import annotations

import ast
import asyncio
import doctest
import importlib
import inspect
import os
import pkgutil
import re
import sys
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

import qcore
from qcore.db import Database
from qcore.sync import SyncBoss
from tests.conftest import admin_execute, with_database

pytestmark = [pytest.mark.postgres, pytest.mark.feature("docs")]

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: seconds one block may run (a loop that never ends fails instead of hanging; the
#: tutorial starts an embedded PGlite, slow on a busy machine)
BLOCK_TIMEOUT = 120

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<verb>\w+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
_URL = re.compile(r"postgres(?:ql)?://[^\s\"']*")


@dataclass(frozen=True)
class Block:
    """One ```python block: where it starts, its code, and a skip reason if marked."""

    page: Path
    line: int
    code: str
    skip: str | None


def blocks_of(page: Path) -> list[Block]:
    """The ```python blocks of one page, in order, each with the marker above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m["lang"]:
            i += 1
            continue
        start, indent = i, m["indent"]
        i += 1
        body: list[str] = []
        while i < len(lines) and not _FENCE.match(lines[i]):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        if m["lang"] not in ("python", "py"):
            continue
        skip = None
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = _MARKER.match(lines[j]) if j >= 0 else None
        if marker:
            if marker["verb"] != "skip" or not (marker["reason"] or "").strip():
                raise ValueError(
                    f"{page.relative_to(DOCS)}:{j + 1}: a docs-test marker is"
                    " `<!-- docs-test: skip (reason) -->`"
                )
            skip = marker["reason"].strip()
        found.append(Block(page, start + 1, "\n".join(body) + "\n", skip))
    return found


def pages() -> list[Path]:
    """Every page of docs/ (the design notes included) with a ```python block."""
    return sorted(p for p in DOCS.rglob("*.md") if blocks_of(p))


def _stop_all(namespace: dict[str, Any]) -> Iterator[Any]:
    """What a page left running: the Boss objects in its namespace."""
    for value in list(namespace.values()):
        if isinstance(value, qcore.Boss | SyncBoss):
            yield value


async def _close_pools(namespace: dict[str, Any]) -> None:
    """Close the pools and engines a page opened and left to its reader (qcore never closes
    a caller's): left open, they keep reconnecting to the page's dropped database in the
    background, tasks another test on this loop would count as its own."""
    for value in list(namespace.values()):
        if isinstance(value, AsyncConnectionPool | Database):  # an adapter closes what it owns
            await value.close()
        elif callable(getattr(value, "dispose", None)):  # an SQLAlchemy AsyncEngine
            await value.dispose()


async def _run_block(block: Block, namespace: dict[str, Any], url: str) -> None:
    source = _URL.sub(url, block.code)
    name = f"{block.page.relative_to(DOCS)}:{block.line}"
    code = compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        result = eval(code, namespace)
        await asyncio.wait_for(result, BLOCK_TIMEOUT)
    else:
        await asyncio.wait_for(asyncio.to_thread(exec, code, namespace), BLOCK_TIMEOUT)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
async def test_docs_page_runs(page: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    database = f"docs_{uuid.uuid4().hex[:12]}"
    admin_execute(f'CREATE DATABASE "{database}" TEMPLATE template0', pg_dsn)
    url = with_database(pg_dsn, database)
    monkeypatch.setenv("DATABASE_URL", url)
    boss = qcore.Boss(url)
    # a module of its own, so a dataclass or a pickled function can find its namespace
    module = types.ModuleType(f"docs_page_{database}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace: dict[str, Any] = module.__dict__
    namespace.update(
        {
            "url": url,
            "asyncio": asyncio,
            "os": os,
            "Boss": qcore.Boss,
            "SyncBoss": SyncBoss,
            "boss": boss,
        }
    )
    try:
        await boss.start()
        for block in blocks_of(page):
            if block.skip:
                continue  # reported by test_docs_block_skipped
            try:
                await _run_block(block, namespace, url)
            except Exception as exc:
                raise AssertionError(
                    f"{page.relative_to(DOCS)}, the block at line {block.line} raised"
                    f" {type(exc).__name__}: {exc}\n{block.code}"
                ) from exc
    finally:
        for left in [boss, *_stop_all(namespace)]:
            try:
                if isinstance(left, SyncBoss):
                    await asyncio.to_thread(left.close, graceful=False)
                else:
                    await left.stop(graceful=False)
            except Exception:
                pass
        await _close_pools(namespace)
        admin_execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', pg_dsn)


def _marked() -> list[Block]:
    return [b for page in pages() for b in blocks_of(page) if b.skip]


@pytest.mark.parametrize("block", _marked(), ids=lambda b: f"{b.page.relative_to(DOCS)}:{b.line}")
def test_docs_block_skipped(block: Block) -> None:
    """Each block marked ``docs-test: skip``, reported with the reason the page gives."""
    pytest.skip(f"{block.page.relative_to(DOCS)}:{block.line}: {block.skip}")


def test_every_marker_sits_on_a_python_block() -> None:
    """A ``docs-test`` comment that no longer sits above a python block is stale."""
    for page in DOCS.rglob("*.md"):
        lines = page.read_text(encoding="utf-8").splitlines()
        marked = {b.line for b in blocks_of(page) if b.skip}
        for n, text in enumerate(lines, start=1):
            if not _MARKER.match(text):
                continue
            k = n
            while k < len(lines) and not lines[k].strip():
                k += 1
            assert k + 1 in marked, f"{page.relative_to(DOCS)}:{n}: marker above no python block"


def _modules() -> Iterator[types.ModuleType]:
    for info in pkgutil.walk_packages(qcore.__path__, "qcore."):
        if ".conformance.suite" in info.name:
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue


def test_docstring_examples_are_sketches() -> None:
    """No docstring of qcore holds a doctest with expected output (see the module's
    docstring); one that does would have to run here."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runnable: list[str] = []
    for module in _modules():
        for test in finder.find(module, module.__name__):
            if any(example.want.strip() for example in test.examples):
                runnable.append(test.name)
    assert not runnable, f"docstrings with doctest output to run: {sorted(runnable)}"
