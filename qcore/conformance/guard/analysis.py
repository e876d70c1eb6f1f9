"""Which capabilities a statement uses: parse it (pglast), walk every statement and
function body, and run the detectors; what of that a backend lacks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pglast
from pglast import ast

from qcore.backend import Backend
from qcore.conformance.guard.detectors import (
    DYNAMIC_QUERY,
    NODE_DETECTORS,
    ORDER,
    PLPGSQL_DETECTORS,
    STATEMENT_DETECTORS,
    GuardParseError,
    forbidden_features,
    walk,
)
from qcore.conformance.schemas import FRESH_NAME
from qcore.errors import first_line


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
    for node in walk(statement):
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
    for node in walk(statement):
        for name, detect in NODE_DETECTORS:
            if name not in found and detect(node):
                found.add(name)
    for unit in _statements_of(statement):
        for name, detect_statement in STATEMENT_DETECTORS:
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
                    for name, detect in PLPGSQL_DETECTORS:
                        if detect(key, value):
                            found.add(name)
                    if key == "PLpgSQL_expr":
                        found |= _expression_features(value)
                    dynamic = DYNAMIC_QUERY.get(key)
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


#: the schema name a statement's analysis is cached under, in place of the test's own
_ANY_SCHEMA = "qcore_test_000000000000"


def analyse(sql: str) -> tuple[StatementFeatures, ...]:
    """Per top-level statement, every feature with a detector that it uses (whatever
    the backend). Raises :class:`GuardParseError` on SQL that does not parse or a
    PL/pgSQL body that does not compile.

    Cached per SQL text, the kit's schema name taken out: every test runs the same
    statements on a schema of its own (:func:`~qcore.conformance.schemas.fresh_name`),
    and what a statement uses does not depend on that name.
    """
    names = set(FRESH_NAME.findall(sql))
    if len(names) != 1:
        return analyse_text(sql)
    [name] = names
    return tuple(
        StatementFeatures(found.statement.replace(_ANY_SCHEMA, name), found.features)
        for found in analyse_text(sql.replace(name, _ANY_SCHEMA))
    )


@lru_cache(maxsize=4096)
def analyse_text(sql: str) -> tuple[StatementFeatures, ...]:
    """:func:`analyse` of ``sql`` as it is, cached per text."""
    result = []
    for raw in _parse_sql(sql):
        text = _statement_text(sql, raw)
        found = _statement_features(raw.stmt, text)
        result.append(
            StatementFeatures(first_line(text) or "", tuple(sorted(found, key=ORDER.__getitem__)))
        )
    return tuple(result)


def features_used(sql: str) -> tuple[str, ...]:
    """Every feature with a detector that ``sql`` uses, in :data:`DETECTORS` order."""
    found = {f for s in analyse(sql) for f in s.features}
    return tuple(sorted(found, key=ORDER.__getitem__))


def violations(sql: str, backend: Backend) -> list[str]:
    """The features ``sql`` uses that ``backend`` lacks, in :data:`DETECTORS` order
    (empty when the backend can run it). Raises :class:`GuardParseError` if ``sql``
    does not parse."""
    forbidden = forbidden_features(backend)
    return [f for f in features_used(sql) if f in forbidden]
