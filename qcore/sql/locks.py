"""Lock keys, the NOTIFY channel name and the statements that take locks.

pg-boss excludes its instances with transaction-scoped advisory locks whose
keys are derived from the database name, the schema *as configured* and a
suffix naming the operation; a qcore instance must derive the very same
numbers to exclude a pg-boss instance on the same schema (and the other way
round). Engines without advisory locks get a lease row in qcore's own lock
table instead.

The formulas (reference, sections 4 and 5):

* ``N`` = the ``schema`` option unchanged, except that a double-quoted name
  whose content is a lower-case bare identifier loses its quotes. A bare
  mixed-case name is *not* folded, so ``MySchema`` and ``myschema`` get
  different keys although PostgreSQL stores both as ``myschema``.
* key = the first 8 bytes of SHA-224 of ``current_database() || '.pgboss.'
  || N || suffix`` (no separator before the suffix), as a signed big-endian
  64-bit integer.
* channel = ``'pgboss_'`` + the first 24 hex digits of SHA-224 of ``N``.

pg-boss hashes ``text::bytea``, which reads backslash escapes; the
client-side :func:`lock_key` reads the input the same way, so both sides
agree even for a database name holding a backslash.
"""

from __future__ import annotations

import functools
import hashlib
import re

from qcore.identifiers import quote, schema_name
from qcore.sql._statement import DDL, Params, Statement

__all__ = [
    "INSTALL",
    "LOCK_TABLE",
    "acquire_lease",
    "advisory_xact_lock",
    "create_lock_table",
    "lease_holder",
    "lease_name",
    "lock_key",
    "lock_key_expression",
    "lock_key_text",
    "normalized_schema",
    "notify_channel",
    "release_lease",
    "renew_lease",
    "set_lock_timeout",
]

#: the suffix of the install / migration lock (pg-boss's key with nothing appended)
INSTALL = ""
#: qcore's lease table, in the pg-boss schema (pg-boss never reads it)
LOCK_TABLE = "qcore_lock"

_REDUNDANT_QUOTES = re.compile(r'"[a-z_][a-z0-9_]*"')


def normalized_schema(schema_spec: str) -> str:
    """``N``: the spelling pg-boss hashes into lock keys and the channel name.

    Validates ``schema_spec`` first (``ValidationError`` on a bad name).
    """
    schema_name(schema_spec)
    if _REDUNDANT_QUOTES.fullmatch(schema_spec):
        return schema_spec[1:-1]
    return schema_spec


def lock_key_text(schema_spec: str, suffix: str = "") -> str:
    """What follows ``current_database()`` in the hashed text: ``'.pgboss.' || N || suffix``."""
    return f".pgboss.{normalized_schema(schema_spec)}{suffix}"


def _bytea_input(text: str) -> bytes:
    """The bytes PostgreSQL's ``text::bytea`` gives for ``text`` (hex or escape format)."""
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    raw = text.encode()
    if b"\\" not in raw:
        return raw
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i : i + 1] != b"\\":
            out.append(raw[i])
            i += 1
        elif raw[i + 1 : i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(rb"[0-3][0-7][0-7]", raw[i + 1 : i + 4]):
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            raise ValueError(f"{text!r} is not valid bytea input")
    return bytes(out)


def lock_key(database: str, schema_spec: str, suffix: str = "") -> int:
    """The advisory lock key pg-boss uses in ``database`` for ``schema_spec`` and ``suffix``.

    Computed here: the same number :func:`lock_key_expression` computes in the server.
    """
    digest = hashlib.sha224(_bytea_input(database + lock_key_text(schema_spec, suffix))).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_key_expression(param: str = "$1") -> str:
    """A SQL expression computing the key in the server.

    From ``current_database()`` and a text parameter holding :func:`lock_key_text`; same
    on every engine that has advisory locks.
    """
    return (
        f"('x' || encode(sha224((current_database() || {param}::text)::bytea), 'hex'))"
        "::bit(64)::bigint"
    )


# Wait for pg-boss's transaction-scoped lock of ``key`` (:func:`lock_key_text`); only on
# backends with advisory locks (lease backends take a lease row instead).
advisory_xact_lock = Statement(
    f"SELECT pg_advisory_xact_lock({lock_key_expression()}) AS locked", ("key",)
)


def set_lock_timeout(seconds: float) -> Statement:
    """Bound every lock wait of the current transaction (the same on every engine).

    SET takes no parameters, so the milliseconds are an integer literal.
    """
    millis = max(1, int(seconds * 1000))
    return Statement(f"SET LOCAL lock_timeout = {millis}")


@functools.lru_cache(maxsize=64)  # on every send's path: hash once per schema
def notify_channel(schema_spec: str) -> str:
    """The LISTEN/NOTIFY channel of a schema: ``pgboss_`` + 24 hex digits of SHA-224(N).

    The database name is not part of it. For ``pgboss``:
    ``pgboss_454650302e472074f72063fd``.
    """
    digest = hashlib.sha224(_bytea_input(normalized_schema(schema_spec))).hexdigest()
    return f"pgboss_{digest[:24]}"


# --------------------------------------------------------------------------- leases


def lease_name(suffix: str = "") -> str:
    """The row name of lock ``suffix`` in the lease table (the install lock is ``install``)."""
    return suffix or "install"


def create_lock_table(schema: str) -> DDL:
    """qcore's lease table; idempotent, created by every backend (pg-boss ignores it)."""
    return DDL(
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(LOCK_TABLE)} ("
        " name text PRIMARY KEY,"
        " holder text NOT NULL,"
        " expires_on timestamptz NOT NULL"
        ")"
    )


def _lease_table(schema: str) -> str:
    return f"{quote(schema)}.{quote(LOCK_TABLE)}"


@functools.lru_cache(maxsize=16)
def acquire_lease(schema: str) -> Statement:
    """Take lease ``name`` for ``holder`` for ``seconds`` if it is free or ran out.

    Taken if nobody holds it or the holder's lease ran out.

    One mutation of one table, so it runs on every engine; a row comes back when the
    lease is ours, none when someone else holds it.
    """
    p = Params()
    return p.statement(
        f"INSERT INTO {_lease_table(schema)} AS l (name, holder, expires_on)"
        f" VALUES ({p('name')}, {p('holder')},"
        f" clock_timestamp() + {p('seconds')}::float8 * interval '1 second')"
        " ON CONFLICT (name) DO UPDATE"
        " SET holder = excluded.holder, expires_on = excluded.expires_on"
        " WHERE l.expires_on < clock_timestamp() OR l.holder = excluded.holder"
        " RETURNING l.holder"
    )


@functools.lru_cache(maxsize=16)
def renew_lease(schema: str) -> Statement:
    """Push the expiry of lease ``name`` held by ``holder`` out to ``seconds`` from now.

    No row back means it was lost.
    """
    p = Params()
    return p.statement(
        f"UPDATE {_lease_table(schema)} SET expires_on = clock_timestamp()"
        f" + {p('seconds')}::float8 * interval '1 second'"
        f" WHERE name = {p('name')} AND holder = {p('holder')} RETURNING holder"
    )


@functools.lru_cache(maxsize=16)
def release_lease(schema: str) -> Statement:
    """Give lease ``name`` back (only if ``holder`` still holds it)."""
    p = Params()
    return p.statement(
        f"DELETE FROM {_lease_table(schema)} WHERE name = {p('name')} AND holder = {p('holder')}"
    )


@functools.lru_cache(maxsize=16)
def lease_holder(schema: str) -> Statement:
    """Who holds lease ``name`` and until when (for messages)."""
    p = Params()
    return p.statement(
        f"SELECT holder, expires_on FROM {_lease_table(schema)} WHERE name = {p('name')}"
    )
