"""$n → %s rewriting: literals, comments and dollar quotes survive (no database needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qcore.db._placeholders import reorder, to_format
from qcore.errors import ValidationError

pytestmark = pytest.mark.feature("adapters")


@pytest.mark.parametrize(
    ("sql", "text", "order"),
    [
        ("SELECT $1", "SELECT %s", (0,)),
        ("SELECT $2, $1, $2", "SELECT %s, %s, %s", (1, 0, 1)),
        ("SELECT '$1 % ?'", "SELECT '$1 %% ?'", ()),
        ("SELECT 'it''s $1', $1", "SELECT 'it''s $1', %s", (0,)),
        ("SELECT E'\\'$1', $1", "SELECT E'\\'$1', %s", (0,)),
        ('SELECT "a$1", $1', 'SELECT "a$1", %s', (0,)),
        ("SELECT $$ $1 % $$, $1", "SELECT $$ $1 %% $$, %s", (0,)),
        ("SELECT $fn$ $1 $x$ $fn$, $10", "SELECT $fn$ $1 $x$ $fn$, %s", (9,)),
        ("SELECT 1 -- $1 %\n, $1", "SELECT 1 -- $1 %%\n, %s", (0,)),
        ("SELECT /* $1 /* $2 */ % */ $1", "SELECT /* $1 /* $2 */ %% */ %s", (0,)),
        ("SELECT a$1 FROM t", "SELECT a$1 FROM t", ()),  # $ inside an identifier
        ("SELECT 5 % 2, $1", "SELECT 5 %% 2, %s", (0,)),
        ("SELECT '", "SELECT '", ()),  # unterminated: passed through for the server to reject
    ],
)
def test_to_format(sql: str, text: str, order: tuple[int, ...]) -> None:
    assert to_format(sql) == (text, order)


def test_reorder_repeats_and_reorders() -> None:
    assert reorder((1, 0, 1), ["a", "b"]) == ["b", "a", "b"]


def test_reorder_reports_missing_parameters() -> None:
    with pytest.raises(ValidationError, match=r"uses \$3 but 2 parameter"):
        reorder((0, 2), ["a", "b"])


@given(st.text(alphabet=st.characters(blacklist_characters="'\"$-/%"), max_size=40))
def test_text_without_special_characters_is_unchanged(sql: str) -> None:
    assert to_format(sql) == (sql, ())


@given(st.text(max_size=40))
def test_literal_content_is_kept_verbatim(content: str) -> None:
    literal = "'" + content.replace("'", "''") + "'"
    text, order = to_format(f"SELECT {literal}, $1")
    assert text == f"SELECT {literal.replace('%', '%%')}, %s"
    assert order == (0,)
