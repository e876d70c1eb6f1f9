"""The error tree and the schema-name rules (no database needed)."""

from __future__ import annotations

import re

import pytest

from qcore.errors import (
    ConnectionLostError,
    DatabaseError,
    QcoreError,
    SerializationError,
    UniqueViolation,
    ValidationError,
    database_error,
)
from qcore.identifiers import quote, schema_name

pytestmark = pytest.mark.feature("errors")


@pytest.mark.parametrize(
    ("sqlstate", "cls", "retryable"),
    [
        ("40001", SerializationError, True),
        ("40P01", SerializationError, True),
        ("23505", UniqueViolation, False),
        ("08006", ConnectionLostError, True),
        ("57P01", ConnectionLostError, True),
        ("42601", DatabaseError, False),
        (None, DatabaseError, False),
    ],
)
def test_sqlstate_picks_the_class(sqlstate: str | None, cls: type, retryable: bool) -> None:
    err = database_error("boom", sqlstate=sqlstate, sql="\n  UPDATE job SET x = 1\n  WHERE y")
    assert type(err) is cls
    assert err.retryable is retryable
    assert err.statement == "UPDATE job SET x = 1"
    assert isinstance(err, QcoreError)


def test_backend_specific_retryable_codes() -> None:
    err = database_error("restart", sqlstate="40003", retryable_sqlstates=frozenset({"40003"}))
    assert type(err) is DatabaseError and err.retryable


def test_message_names_sqlstate_and_statement() -> None:
    err = database_error("duplicate key", sqlstate="23505", sql="INSERT INTO t VALUES (1)")
    assert str(err) == "duplicate key [SQLSTATE 23505] in: INSERT INTO t VALUES (1)"


@pytest.mark.parametrize(
    ("spec", "stored"),
    [
        ("pgboss", "pgboss"),
        ("MySchema", "myschema"),
        ('"MySchema"', "MySchema"),
        ('"My-Schema é"', "My-Schema é"),
        ("_x1", "_x1"),
        ("a" * 50, "a" * 50),
    ],
)
def test_schema_names_accepted(spec: str, stored: str) -> None:
    assert schema_name(spec) == stored


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("1abc", "not a bare identifier"),
        ("my-schema", "not a bare identifier"),
        ("a" * 51, "the limit is 50"),
        ('"' + "é" * 26 + '"', "52 bytes long"),
        ('"a.b"', "contains '.'"),
        ('"a$b"', "contains '$'"),
        ('"a%b"', "contains '%'"),
        ('"a\'b"', 'contains "\'"'),
        ('"a\\b"', "contains '\\\\'"),
        ('"a\nb"', "contains '\\n'"),
        ('"a""b"', "contains '\"'"),
        ('""', "is empty"),
        ("", "non-empty string"),
    ],
)
def test_schema_names_rejected(spec: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        schema_name(spec)


def test_quote_doubles_quotes_and_refuses_nul() -> None:
    assert quote('we"ird') == '"we""ird"'
    with pytest.raises(ValidationError):
        quote("a\x00b")
    with pytest.raises(ValidationError):
        quote("x" * 64)
