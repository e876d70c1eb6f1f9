"""What the guard looks for: one detector per capability a backend may switch off, over
the parse tree of a statement (and of PL/pgSQL bodies), and the errors it raises."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pglast import ast
from pglast.enums import ConstrType, LockWaitPolicy

from qcore.backend import Backend
from qcore.errors import DatabaseError

FEATURE_NOT_SUPPORTED = "0A000"


SYNTAX_ERROR = "42601"


SERIALIZATION_FAILURE = "40001"


IN_FAILED_TRANSACTION = "25P02"


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


def walk(value: Any, *, stop: Callable[[Any], bool] | None = None) -> Iterator[Any]:
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


def _planner_settings(node: Any) -> bool:
    # SET [LOCAL] enable_* ..., set_config('enable_*', ...)
    if isinstance(node, ast.VariableSetStmt):
        return (node.name or "").startswith("enable_")
    if _func_name(node) != "set_config" or not node.args:
        return False
    first = node.args[0]
    value = getattr(first, "val", None) if isinstance(first, ast.A_Const) else None
    return isinstance(value, ast.String) and (value.sval or "").startswith("enable_")


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
    for node in walk(statement, stop=lambda n: isinstance(n, _STATEMENT_SCOPES)):
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


DYNAMIC_QUERY = {  # PL/pgSQL statement -> the field holding its dynamic query
    "PLpgSQL_stmt_dynexecute": "query",  # EXECUTE ...
    "PLpgSQL_stmt_dynfors": "query",  # FOR r IN EXECUTE ... LOOP
    "PLpgSQL_stmt_open": "dynquery",  # OPEN c FOR EXECUTE ...
    "PLpgSQL_stmt_return_query": "dynquery",  # RETURN QUERY EXECUTE ...
}


def _plpgsql_dynamic(kind: str, fields: Mapping[str, Any]) -> bool:
    if kind == "PLpgSQL_stmt_perform":
        return True
    key = DYNAMIC_QUERY.get(kind)
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
        "planner_settings": Detector(
            "SET enable_* and set_config('enable_*', ...)", node=_planner_settings
        ),
    }
)


ORDER = {name: i for i, name in enumerate(DETECTORS)}


NODE_DETECTORS = [(n, d.node) for n, d in DETECTORS.items() if d.node is not None]


STATEMENT_DETECTORS = [(n, d.statement) for n, d in DETECTORS.items() if d.statement is not None]


PLPGSQL_DETECTORS = [(n, d.plpgsql) for n, d in DETECTORS.items() if d.plpgsql is not None]


def forbidden_features(backend: Backend) -> frozenset[str]:
    """The features the guard refuses for ``backend``: its ``False`` flags that have a detector."""
    return frozenset(
        name for name, on in backend.features().items() if not on and name in DETECTORS
    )
