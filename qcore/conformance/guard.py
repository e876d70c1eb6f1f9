"""The capability guard: real PostgreSQL standing in for an engine that cannot run here.

When the compatibility matrix *emulates* a backend (CockroachDB, YugabyteDB,
Citus ...) on a plain PostgreSQL, every statement qcore sends goes through a
:class:`GuardedDatabase`. The guard parses the statement with ``pglast``
(PostgreSQL's own parser) — PL/pgSQL bodies of ``CREATE FUNCTION`` and ``DO``
blocks and SQL-language function bodies included — and raises
:class:`UnsupportedFeature` (SQLSTATE ``0A000``, what a real engine sends)
before the statement reaches the server if it uses a feature the emulated
backend lacks.

What is forbidden is *derived* from the backend's flags: :data:`DETECTORS`
maps a feature name (a key of :meth:`qcore.backend.Backend.features`) to a
detector, and a backend forbids every feature that is ``False`` in its
flags and has a detector. There is no per-backend list. The behavioural
flags ``transactional_ddl`` and ``single_session`` have no detector: no
statement text reveals them.

The guard also injects faults so retry paths run without a real distributed
engine: :meth:`GuardedDatabase.inject_serialization_failure`.

Unparseable SQL is refused with :class:`GuardParseError` (SQLSTATE ``42601``,
a ``DatabaseError``) instead of being passed to the server: a statement the
guard cannot read is one it cannot vouch for, and the server would reject it
as well.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import pglast
from pglast import ast
from pglast.enums import ConstrType, LockWaitPolicy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from qcore.backend import Backend
from qcore.db._base import Bound, Database, Listener, OnMessage, OnReconnect, Rows
from qcore.errors import DatabaseError, SerializationError, first_line
from qcore.sql.engine import EMULATION_SETTING

__all__ = [
    "DETECTORS",
    "Detector",
    "GuardParseError",
    "GuardedDatabase",
    "StatementFeatures",
    "UnsupportedFeature",
    "analyse",
    "emulation_conninfo",
    "features_used",
    "forbidden_features",
    "violations",
]

FEATURE_NOT_SUPPORTED = "0A000"
SYNTAX_ERROR = "42601"
SERIALIZATION_FAILURE = "40001"
IN_FAILED_TRANSACTION = "25P02"


# --------------------------------------------------------------------------- errors


class UnsupportedFeature(DatabaseError):
    """A statement uses a feature the emulated backend lacks (SQLSTATE ``0A000``).

    ``feature`` is the first offending feature name (a key of
    ``Backend.features()``), ``features`` all of them for that statement,
    ``backend`` the emulated backend's name.
    """

    def __init__(
        self,
        message: str,
        *,
        feature: str,
        backend: str,
        statement: str | None = None,
        features: Sequence[str] = (),
    ) -> None:
        super().__init__(message, sqlstate=FEATURE_NOT_SUPPORTED, statement=statement)
        self.feature = feature
        self.backend = backend
        self.features: tuple[str, ...] = tuple(features) or (feature,)


class GuardParseError(DatabaseError):
    """The guard could not parse a statement (SQLSTATE ``42601``); it was not sent."""

    def __init__(self, message: str, *, statement: str | None = None) -> None:
        super().__init__(message, sqlstate=SYNTAX_ERROR, statement=statement)


# --------------------------------------------------------------------------- tree walking


def _walk(value: Any, *, stop: Callable[[Any], bool] | None = None) -> Iterator[Any]:
    """Every pglast node under ``value`` (itself included), depth first.

    A node for which ``stop`` is true is yielded but not descended into.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Node):
            yield item
            if stop is not None and stop(item):
                continue
            children = [getattr(item, name, None) for name in item]
            stack.extend(c for c in reversed(children) if isinstance(c, (ast.Node, tuple, list)))
        elif isinstance(item, (tuple, list)):
            stack.extend(c for c in reversed(item) if isinstance(c, (ast.Node, tuple, list)))


def _func_name(node: Any) -> str | None:
    """The unqualified name of a ``FuncCall`` (as the parser folded it), else None."""
    if not isinstance(node, ast.FuncCall) or not node.funcname:
        return None
    last = node.funcname[-1]
    return last.sval if isinstance(last, ast.String) else None


def _catalog_relation(node: Any) -> str | None:
    """The name of a ``RangeVar`` that may resolve to a system catalog relation."""
    if not isinstance(node, ast.RangeVar):
        return None
    if node.schemaname not in (None, "pg_catalog"):
        return None
    return str(node.relname)


# --------------------------------------------------------------------------- detectors


@dataclass(frozen=True)
class Detector:
    """How to recognise one feature in parsed SQL or PL/pgSQL.

    Each hook is optional: ``node`` is asked about every SQL parse-tree node,
    ``statement`` about every whole SQL statement (function bodies and rule
    actions are statements of their own), ``plpgsql`` about every PL/pgSQL
    node (its type name, e.g. ``"PLpgSQL_stmt_perform"``, and its fields).
    """

    description: str
    node: Callable[[Any], bool] | None = None
    statement: Callable[[Any], bool] | None = None
    plpgsql: Callable[[str, Mapping[str, Any]], bool] | None = None


def _skip_locked(node: Any) -> bool:
    return isinstance(node, ast.LockingClause) and node.waitPolicy == LockWaitPolicy.LockWaitSkip


def _advisory_lock(node: Any) -> bool:
    name = _func_name(node)
    return name is not None and name.startswith(("pg_advisory_", "pg_try_advisory_"))


def _partitioning(node: Any) -> bool:
    # PARTITION BY (PartitionSpec), PARTITION OF (PartitionBoundSpec),
    # ATTACH / DETACH PARTITION (PartitionCmd)
    return isinstance(node, (ast.PartitionSpec, ast.PartitionBoundSpec, ast.PartitionCmd))


_DEFERRABLE_ATTRS = (ConstrType.CONSTR_ATTR_DEFERRABLE, ConstrType.CONSTR_ATTR_DEFERRED)


def _deferrable(node: Any) -> bool:
    if isinstance(node, ast.Constraint):
        # table constraints carry the flags; a column constraint's DEFERRABLE /
        # INITIALLY DEFERRED is a separate attribute node in the raw tree
        return bool(node.deferrable or node.initdeferred or node.contype in _DEFERRABLE_ATTRS)
    if isinstance(node, ast.ATAlterConstraint):  # ALTER TABLE ... ALTER CONSTRAINT c DEFERRABLE
        return bool(node.alterDeferrability and (node.deferrable or node.initdeferred))
    if isinstance(node, ast.CreateTrigStmt):  # CREATE CONSTRAINT TRIGGER ... DEFERRABLE
        return bool(node.isconstraint and (node.deferrable or node.initdeferred))
    return isinstance(node, ast.ConstraintsSetStmt) and bool(node.deferred)


def _covering_index(node: Any) -> bool:
    if isinstance(node, ast.IndexStmt):
        return bool(node.indexIncludingParams)
    return isinstance(node, ast.Constraint) and bool(node.including)  # UNIQUE (...) INCLUDE (...)


def _listen_notify(node: Any) -> bool:
    if isinstance(node, (ast.ListenStmt, ast.UnlistenStmt, ast.NotifyStmt)):
        return True
    return _func_name(node) == "pg_notify"


_MUTATIONS = (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt)
# nodes that hold statements of their own (function bodies, rule actions)
_STATEMENT_SCOPES = (ast.CreateFunctionStmt, ast.RuleStmt)


def _mutation_targets(statement: Any) -> list[tuple[str | None, str]]:
    """(schema, table) of every INSERT/UPDATE/DELETE/MERGE in one statement.

    Names come folded by the parser as PostgreSQL folds them (unquoted to
    lower case, quoted kept as written).
    """
    targets: list[tuple[str | None, str]] = []
    # a function or rule mutates nothing itself; its body statements are judged apart
    for node in _walk(statement, stop=lambda n: isinstance(n, _STATEMENT_SCOPES)):
        if isinstance(node, _MUTATIONS) and isinstance(node.relation, ast.RangeVar):
            targets.append((node.relation.schemaname, str(node.relation.relname)))
    return targets


def _same_table(a: tuple[str | None, str], b: tuple[str | None, str]) -> bool:
    """Whether two targets may be one table: same name, and same schema unless one
    of them is unqualified (it may resolve to the other through search_path)."""
    return a[1] == b[1] and (a[0] is None or b[0] is None or a[0] == b[0])


def _multi_mutation(statement: Any) -> bool:
    targets = _mutation_targets(statement)
    return any(
        _same_table(targets[i], targets[j])
        for i in range(len(targets))
        for j in range(i + 1, len(targets))
    )


def _reindex(node: Any) -> bool:
    return isinstance(node, ast.ReindexStmt)


_PLANNER_STATS = frozenset({"pg_stats", "pg_stats_ext", "pg_stats_ext_exprs"})
_NOT_VACUUM_STAT_FUNCTIONS = ("pg_stat_get_activity", "pg_stat_get_progress_info")


def _vacuum_stats(node: Any) -> bool:
    rel = _catalog_relation(node)
    if rel is not None:
        if rel in _PLANNER_STATS or rel.startswith("pg_statio_"):
            return True
        return rel.startswith("pg_stat_") and not rel.startswith(
            ("pg_stat_activity", "pg_stat_progress_")
        )
    name = _func_name(node)  # the accessors behind the views: pg_stat_get_dead_tuples(...)
    return (
        name is not None
        and name.startswith("pg_stat_get_")
        and not name.startswith(("pg_stat_get_backend_", *_NOT_VACUUM_STAT_FUNCTIONS))
    )


def _index_build_progress(node: Any) -> bool:
    rel = _catalog_relation(node)
    return rel is not None and rel.startswith("pg_stat_progress_")


_DRIFT_FUNCTIONS = frozenset(
    {
        "pg_get_indexdef",
        "pg_get_constraintdef",
        "pg_get_functiondef",
        "pg_get_triggerdef",
        "pg_get_expr",
    }
)


def _drift_catalog(node: Any) -> bool:
    return _func_name(node) in _DRIFT_FUNCTIONS


_DYNAMIC_QUERY = {  # PL/pgSQL statement -> the field holding its dynamic query
    "PLpgSQL_stmt_dynexecute": "query",  # EXECUTE ...
    "PLpgSQL_stmt_dynfors": "query",  # FOR r IN EXECUTE ... LOOP
    "PLpgSQL_stmt_open": "dynquery",  # OPEN c FOR EXECUTE ...
    "PLpgSQL_stmt_return_query": "dynquery",  # RETURN QUERY EXECUTE ...
}


def _plpgsql_dynamic(kind: str, fields: Mapping[str, Any]) -> bool:
    if kind == "PLpgSQL_stmt_perform":
        return True
    key = _DYNAMIC_QUERY.get(kind)
    return key is not None and fields.get(key) is not None


#: feature name (a key of ``Backend.features()``) -> how to spot it. The one table.
DETECTORS: Mapping[str, Detector] = MappingProxyType(
    {
        "skip_locked": Detector("FOR UPDATE/SHARE ... SKIP LOCKED", node=_skip_locked),
        "advisory_locks": Detector("pg_advisory_* / pg_try_advisory_* calls", node=_advisory_lock),
        "partitioning": Detector(
            "PARTITION BY, PARTITION OF, ATTACH/DETACH PARTITION", node=_partitioning
        ),
        "deferrable_foreign_keys": Detector(
            "DEFERRABLE constraints, SET CONSTRAINTS ... DEFERRED", node=_deferrable
        ),
        "covering_indexes": Detector(
            "INCLUDE (...) in an index or constraint", node=_covering_index
        ),
        "multi_mutation_cte": Detector(
            "one table modified more than once in a statement", statement=_multi_mutation
        ),
        "listen_notify": Detector("LISTEN, UNLISTEN, NOTIFY, pg_notify()", node=_listen_notify),
        "reindex": Detector("REINDEX", node=_reindex),
        "vacuum_stats": Detector("pg_stat_* / pg_statio_* / pg_stats reads", node=_vacuum_stats),
        "index_build_progress": Detector(
            "pg_stat_progress_* reads (pg_stat_progress_create_index)", node=_index_build_progress
        ),
        "drift_catalog": Detector(
            "pg_get_indexdef/constraintdef/functiondef/triggerdef/expr", node=_drift_catalog
        ),
        "plpgsql_dynamic": Detector(
            "EXECUTE and PERFORM in PL/pgSQL bodies", plpgsql=_plpgsql_dynamic
        ),
    }
)

_ORDER = {name: i for i, name in enumerate(DETECTORS)}
_NODE_DETECTORS = [(n, d.node) for n, d in DETECTORS.items() if d.node is not None]
_STATEMENT_DETECTORS = [(n, d.statement) for n, d in DETECTORS.items() if d.statement is not None]
_PLPGSQL_DETECTORS = [(n, d.plpgsql) for n, d in DETECTORS.items() if d.plpgsql is not None]


def forbidden_features(backend: Backend) -> frozenset[str]:
    """The features the guard refuses for ``backend``: its ``False`` flags that have a detector."""
    return frozenset(
        name for name, on in backend.features().items() if not on and name in DETECTORS
    )


# --------------------------------------------------------------------------- analysis


def _parse_sql(sql: str) -> Any:
    try:
        return pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        raise GuardParseError(
            f"the capability guard cannot parse this statement: {exc}", statement=first_line(sql)
        ) from exc


def _statement_text(sql: str, raw: Any) -> str:
    start = raw.stmt_location or 0
    length = raw.stmt_len or 0
    return sql[start : start + length] if length else sql[start:]


def _statements_of(statement: Any) -> Iterator[Any]:
    """The statement and every statement nested in it (SQL-standard function bodies,
    rule actions), each judged on its own by statement-level detectors."""
    yield statement
    for node in _walk(statement):
        if isinstance(node, ast.CreateFunctionStmt) and node.sql_body is not None:
            body = node.sql_body
            if isinstance(body, ast.Node):  # RETURN expr
                yield body
            else:  # BEGIN ATOMIC ... END: a one-element list holding the statement list
                for part in body:
                    if isinstance(part, ast.Node):
                        yield part
                    elif isinstance(part, (tuple, list)):
                        yield from (s for s in part if isinstance(s, ast.Node))
        elif isinstance(node, ast.RuleStmt) and node.actions:
            yield from (a for a in node.actions if isinstance(a, ast.Node))


def _option(options: Any, name: str) -> Any:
    for opt in options or ():
        if isinstance(opt, ast.DefElem) and opt.defname == name:
            return opt.arg
    return None


def _string(value: Any) -> str | None:
    return value.sval if isinstance(value, ast.String) else None


def _dollar_quote(body: str) -> str:
    tag, n = "$qcore_guard$", 0
    while tag in body:
        n += 1
        tag = f"$qcore_guard_{n}$"
    return tag


def _sql_features(sql: str) -> set[str]:
    """Every detected feature in a SQL text of one or more statements."""
    found: set[str] = set()
    for raw in _parse_sql(sql):
        found |= _statement_features(raw.stmt, _statement_text(sql, raw))
    return found


def _statement_features(statement: Any, text: str) -> set[str]:
    """Every detected feature in one parsed statement whose source is ``text``."""
    found: set[str] = set()
    for node in _walk(statement):
        for name, detect in _NODE_DETECTORS:
            if name not in found and detect(node):
                found.add(name)
    for unit in _statements_of(statement):
        for name, detect_statement in _STATEMENT_DETECTORS:
            if name not in found and detect_statement(unit):
                found.add(name)
    if isinstance(statement, ast.CreateFunctionStmt):
        found |= _function_body_features(statement, text)
    elif isinstance(statement, ast.DoStmt):
        language = (_string(_option(statement.args, "language")) or "plpgsql").lower()
        body = _string(_option(statement.args, "as"))
        if language == "plpgsql" and body is not None:
            tag = _dollar_quote(body)
            wrapper = (
                "CREATE FUNCTION pg_temp.qcore_guard_do() RETURNS void LANGUAGE plpgsql"
                f" AS {tag}{body}{tag}"
            )
            found |= _plpgsql_features(wrapper)
    return found


def _function_body_features(statement: Any, text: str) -> set[str]:
    """Features in the string body of CREATE FUNCTION / PROCEDURE (SQL or PL/pgSQL).

    SQL-standard bodies (``BEGIN ATOMIC``, ``RETURN``) are part of the parse
    tree and were already walked.
    """
    language = (_string(_option(statement.options, "language")) or "sql").lower()
    body_parts = _option(statement.options, "as")
    if isinstance(body_parts, (tuple, list)):
        body = _string(body_parts[0]) if len(body_parts) == 1 else None
    else:
        body = _string(body_parts)
    if body is None:
        return set()
    if language == "plpgsql":
        return _plpgsql_features(text)
    if language == "sql":
        return _sql_features(body)
    return set()


def _plpgsql_features(function_sql: str) -> set[str]:
    """Features in the PL/pgSQL body of one CREATE FUNCTION text."""
    try:
        tree = pglast.parse_plpgsql(function_sql)
    except pglast.parser.ParseError as exc:
        raise GuardParseError(
            f"the capability guard cannot compile this PL/pgSQL body: {exc}",
            statement=first_line(function_sql),
        ) from exc
    found: set[str] = set()
    stack: list[Any] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if key.startswith("PLpgSQL_") and isinstance(value, dict):
                    for name, detect in _PLPGSQL_DETECTORS:
                        if detect(key, value):
                            found.add(name)
                    if key == "PLpgSQL_expr":
                        found |= _expression_features(value)
                    dynamic = _DYNAMIC_QUERY.get(key)
                    if dynamic is not None:
                        found |= _constant_dynamic_features(value.get(dynamic))
                if isinstance(value, (dict, list)):
                    stack.append(value)
    return found


# PL/pgSQL's RawParseMode for an expression's text
_PARSE_DEFAULT, _PARSE_TYPE_NAME, _PARSE_EXPR = 0, 1, 2  # 3, 4, 5: assignments


def _expression_sql(expr: Mapping[str, Any]) -> str | None:
    """An expression or statement of a PL/pgSQL body as SQL the parser takes alone."""
    query = expr.get("query")
    if not isinstance(query, str):
        return None
    mode = expr.get("parseMode", _PARSE_DEFAULT)
    if mode == _PARSE_DEFAULT:
        return query
    if mode == _PARSE_TYPE_NAME:
        return None
    if mode == _PARSE_EXPR:
        return "SELECT " + query
    # an assignment "target[.field][subscript] := expression": drop the target
    depth = 0
    for token in pglast.parser.scan(query):
        if token.name in ("ASCII_40", "ASCII_91"):  # ( [
            depth += 1
        elif token.name in ("ASCII_41", "ASCII_93"):  # ) ]
            depth -= 1
        elif depth == 0 and token.name in ("COLON_EQUALS", "ASCII_61"):  # := =
            return "SELECT " + query[token.end + 1 :]
    return "SELECT " + query


def _expression_features(expr: Mapping[str, Any]) -> set[str]:
    sql = _expression_sql(expr)
    return _sql_features(sql) if sql is not None else set()


def _constant_dynamic_features(expr: Any) -> set[str]:
    """Features of the text of ``EXECUTE 'literal'``: a constant query can be checked too.
    A computed query cannot; a literal that does not parse fails at run time anyway."""
    if not isinstance(expr, dict):
        return set()
    query = expr.get("PLpgSQL_expr", {}).get("query")
    if not isinstance(query, str):
        return set()
    try:
        raws = pglast.parse_sql("SELECT " + query)
        select: Any = raws[0].stmt
        (target,) = select.targetList
        literal = _string(target.val.val) if isinstance(target.val, ast.A_Const) else None
        if len(raws) != 1 or select.fromClause or literal is None:
            return set()
        return _sql_features(literal)
    except (pglast.parser.ParseError, GuardParseError, AttributeError, TypeError, ValueError):
        return set()


@dataclass(frozen=True)
class StatementFeatures:
    """One top-level statement of a text: its first line and the features it uses."""

    statement: str
    features: tuple[str, ...]


@lru_cache(maxsize=4096)
def analyse(sql: str) -> tuple[StatementFeatures, ...]:
    """Per top-level statement, every feature with a detector that it uses (whatever
    the backend). Cached per SQL text. Raises :class:`GuardParseError` on SQL that
    does not parse or a PL/pgSQL body that does not compile."""
    result = []
    for raw in _parse_sql(sql):
        text = _statement_text(sql, raw)
        found = _statement_features(raw.stmt, text)
        result.append(
            StatementFeatures(first_line(text) or "", tuple(sorted(found, key=_ORDER.__getitem__)))
        )
    return tuple(result)


def features_used(sql: str) -> tuple[str, ...]:
    """Every feature with a detector that ``sql`` uses, in :data:`DETECTORS` order."""
    found = {f for s in analyse(sql) for f in s.features}
    return tuple(sorted(found, key=_ORDER.__getitem__))


def violations(sql: str, backend: Backend) -> list[str]:
    """The features ``sql`` uses that ``backend`` lacks, in :data:`DETECTORS` order
    (empty when the backend can run it). Raises :class:`GuardParseError` if ``sql``
    does not parse."""
    forbidden = forbidden_features(backend)
    return [f for f in features_used(sql) if f in forbidden]


# --------------------------------------------------------------------------- the adapter


class _RollbackOnly(Exception):
    """Raised inside the inner transaction to roll it back after an emulated abort."""


class GuardedDatabase(Database):
    """A ``Database`` that refuses, before sending, every statement the backend cannot run.

    ``execute``, ``execute_script``, ``transaction`` and ``listen`` check and
    delegate to ``inner``; a transaction yields a guarded bound adapter.

    Inside a transaction, a refused or fault-injected statement aborts the
    transaction as an error on a real engine would: later statements fail
    with SQLSTATE ``25P02`` and leaving the block rolls back, even if the
    caller caught the error (PostgreSQL answers COMMIT of a failed transaction
    with ROLLBACK).
    """

    def __init__(self, inner: Database, backend: Backend) -> None:
        super().__init__()
        self.inner = inner
        self.backend = backend
        self.forbidden = forbidden_features(backend)
        self.driver = inner.driver
        self.can_listen = inner.can_listen and "listen_notify" not in self.forbidden
        self.atomic_transactions = inner.atomic_transactions
        #: how many serialization failures have been injected so far
        self.injected = 0
        self._tx_nth = 0
        self._tx_times = 0
        self._out_countdown = 0
        self._out_times = 0

    # ----------------------------------------------------------------- checking

    def check(self, sql: str) -> None:
        """Raise :class:`UnsupportedFeature` if ``sql`` uses a feature the backend lacks
        (:class:`GuardParseError` if it does not parse)."""
        for stmt in analyse(sql):
            bad = [f for f in stmt.features if f in self.forbidden]
            if bad:
                feature = bad[0]
                raise UnsupportedFeature(
                    f"{self.backend.name} does not support {feature}"
                    f" ({DETECTORS[feature].description}); refused by the capability guard"
                    f" before it reached the server: {stmt.statement}",
                    feature=feature,
                    backend=self.backend.name,
                    statement=stmt.statement,
                    features=bad,
                )

    # ----------------------------------------------------------------- fault injection

    def inject_serialization_failure(
        self, nth: int, times: int = 1, *, in_transaction: bool = True
    ) -> None:
        """Make statements fail with ``SerializationError`` (SQLSTATE ``40001``, retryable).

        With ``in_transaction`` (the default), the ``nth`` statement (1-based) of
        each of the next ``times`` transactions opened from now on that reach an
        ``nth`` statement fails; the statement is not run and the real transaction
        rolls back. Otherwise the ``nth`` statement executed outside a transaction
        from now on fails, and so do the ``times - 1`` after it (the retries).
        A new call replaces the pending injection of the same kind.
        """
        if nth < 1 or times < 0:
            raise ValueError(f"nth must be >= 1 and times >= 0, got nth={nth}, times={times}")
        if in_transaction:
            self._tx_nth, self._tx_times = nth, times
        else:
            self._out_countdown, self._out_times = nth, times

    def cancel_injections(self) -> None:
        """Drop every pending injected failure."""
        self._tx_times = self._out_times = 0

    def _injected_failure(self, sql: str) -> SerializationError:
        self.injected += 1
        return SerializationError(
            f"restart transaction: injected serialization failure #{self.injected}"
            f" (emulating {self.backend.name})",
            sqlstate=SERIALIZATION_FAILURE,
            statement=first_line(sql),
            retryable=True,
        )

    def _before_outside(self, sql: str) -> None:
        self.check(sql)
        if self._out_times > 0:
            self._out_countdown -= 1
            if self._out_countdown <= 0:
                self._out_times -= 1
                raise self._injected_failure(sql)

    def _tx_injection_due(self, armed: bool, count: int) -> bool:
        if armed and count == self._tx_nth and self._tx_times > 0:
            self._tx_times -= 1
            return True
        return False

    # ----------------------------------------------------------------- Database primitives

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        self._before_outside(sql)
        return await self.inner.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        self._before_outside(sql)
        await self.inner.execute_script(sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Database]:
        armed = self._tx_times > 0
        with contextlib.suppress(_RollbackOnly):
            async with self.inner.transaction() as inner_tx:
                bound = _GuardedBound(self, inner_tx, armed)
                yield bound
                if bound.aborted:
                    raise _RollbackOnly

    async def listen(
        self, channel: str, on_message: OnMessage, on_reconnect: OnReconnect | None = None
    ) -> Listener:
        """Refused when the backend has no LISTEN/NOTIFY; otherwise the inner adapter's."""
        if "listen_notify" in self.forbidden:
            raise UnsupportedFeature(
                f"{self.backend.name} does not support listen_notify"
                f" ({DETECTORS['listen_notify'].description}); refused by the capability guard",
                feature="listen_notify",
                backend=self.backend.name,
                statement="LISTEN",
            )
        return await self.inner.listen(channel, on_message, on_reconnect)

    async def close(self) -> None:
        """Close the inner adapter (which closes only what it opened itself)."""
        await self.inner.close()


class _GuardedBound(Bound):
    """The guarded view of one transaction of the inner adapter."""

    def __init__(self, guard: GuardedDatabase, inner: Database, armed: bool) -> None:
        super().__init__()
        self.driver = guard.driver
        self._guard = guard
        self._inner = inner
        self._armed = armed
        self.statements = 0
        self.aborted = False

    def _before(self, sql: str) -> None:
        if self.aborted:
            raise DatabaseError(
                "current transaction is aborted, commands ignored until end of transaction block",
                sqlstate=IN_FAILED_TRANSACTION,
                statement=first_line(sql),
            )
        self.statements += 1
        try:
            self._guard.check(sql)
        except DatabaseError:
            self.aborted = True
            raise
        if self._guard._tx_injection_due(self._armed, self.statements):
            self.aborted = True
            raise self._guard._injected_failure(sql)

    async def _execute(self, sql: str, params: Sequence[Any]) -> Rows:
        self._before(sql)
        return await self._inner.execute(sql, params)

    async def _execute_script(self, sql: str) -> None:
        self._before(sql)
        await self._inner.execute_script(sql)


# --------------------------------------------------------------------------- sessions

_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _escape_option(value: str) -> str:
    """libpq splits ``options`` on spaces; a backslash escapes a space or a backslash."""
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


def emulation_conninfo(dsn: str, backend: Backend) -> str:
    """``dsn`` with libpq ``options=-c key=value`` for an emulated session: the
    backend's provisioning ``session_settings``, so it runs as the engine would (e.g.
    CockroachDB's ``default_transaction_isolation=serializable``), and the setting
    that tells qcore's engine check which backend the session stands in for
    (``qcore.emulate``). Options already in ``dsn`` are kept."""
    settings = dict(backend.provisioning.session_settings) if backend.provisioning else {}
    settings[EMULATION_SETTING] = backend.name
    params = conninfo_to_dict(dsn)
    parts = [str(params["options"])] if params.get("options") else []
    for key, value in settings.items():
        if not _SETTING_NAME.match(key):
            raise ValueError(f"invalid session setting name {key!r} for {backend.name}")
        parts.append(f"-c {key}={_escape_option(str(value))}")
    params["options"] = " ".join(parts)
    return make_conninfo("", **params)
