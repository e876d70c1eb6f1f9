"""What drift detection expects, read from the catalog's declarations: the same objects
for every spelling of the schema, including a quoted name with a space (read back from
the install's text, such a schema once expected nothing and so never drifted)."""

from __future__ import annotations

import pytest

from qcore import backends
from qcore.identifiers import quote
from qcore.sql.drift import expected

NAMES = backends.names()


@pytest.mark.parametrize("backend", NAMES)
@pytest.mark.parametrize("schema", ["My Schema", "Drift-Check"])
def test_every_schema_name_expects_the_whole_install(backend: str, schema: str) -> None:
    chosen = backends.get(backend)
    plain = expected(chosen, "pgboss", [])
    named = expected(chosen, schema, [])
    assert list(named.tables) == list(plain.tables)
    assert list(named.indexes) == list(plain.indexes)
    assert list(named.functions) == list(plain.functions)
    assert all(quote(schema) in t.definition for t in named.tables.values())


def test_a_queue_with_its_own_table_expects_its_policy_s_indexes() -> None:
    queue = {"name": "o'wn", "policy": "key_strict_fifo", "table_name": "jown"}
    found = expected(backends.get("postgres"), "My Schema", [queue])
    assert found.tables["jown"].definition.endswith(
        'ALTER TABLE "My Schema".job ATTACH PARTITION "My Schema"."jown"'
        " FOR VALUES IN ('o''wn')"
    )
    assert {"jown_i8", "jown_i10", "jown_i11"} <= set(found.indexes)
    assert "jown_i1" not in found.indexes
