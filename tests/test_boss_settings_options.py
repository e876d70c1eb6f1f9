"""``BossOptions`` and the settings dataclasses name the same options with the same
defaults: an option one of them gains, loses or changes shows here first."""

from __future__ import annotations

import inspect
from dataclasses import Field, fields
from typing import Any, get_type_hints

import pytest

from qcore import Boss
from qcore.boss.options import OPTION_NAMES, OWNERS, BossOptions
from qcore.db import ConnectionOptions
from qcore.verbs import instances as instance_ops

pytestmark = pytest.mark.feature("lifecycle")

#: options no settings class owns: the connection's, which ``Boss`` hands to the adapter
EXCEPTIONS = ConnectionOptions.__required_keys__ | ConnectionOptions.__optional_keys__


def _keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def _setting(f: Field[Any], option: Any) -> Any:
    """The setting an option's value makes (converted where the field says: reindex)."""
    return f.metadata["option"][1](option) if "option" in f.metadata else option


def test_every_option_has_exactly_one_owner() -> None:
    owners: dict[str, list[str]] = {}
    for owner in OWNERS:
        for f in fields(owner):
            owners.setdefault(f.name, []).append(owner.__name__)
    options = _keys(BossOptions) - EXCEPTIONS
    assert {name for name in options if len(owners.get(name, [])) != 1} == set()
    assert {name: names for name, names in owners.items() if len(names) > 1} == {}


def test_every_owner_field_is_an_option() -> None:
    owned = {f.name for owner in OWNERS for f in fields(owner)}
    assert owned - _keys(BossOptions) == set()
    assert owned & EXCEPTIONS == set()


def test_option_names_are_the_owners_fields_in_order() -> None:
    assert tuple(f.name for owner in OWNERS for f in fields(owner)) == OPTION_NAMES
    assert len(set(OPTION_NAMES)) == len(OPTION_NAMES)
    assert set(OPTION_NAMES) == _keys(BossOptions) - EXCEPTIONS


def test_the_signature_lists_every_option_with_its_type() -> None:
    parameters = inspect.signature(Boss).parameters
    keyword_only = [p for p in parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert tuple(p.name for p in keyword_only) == OPTION_NAMES
    hints = get_type_hints(BossOptions)
    assert {p.name: p.annotation for p in keyword_only} == {n: hints[n] for n in OPTION_NAMES}


def test_the_signatures_defaults_are_the_settings_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each option's default in ``inspect.signature(Boss)``, given to its owner, makes
    the setting the owner holds by default."""
    monkeypatch.delenv(instance_ops.INSTANCE_KEY_ENV, raising=False)
    parameters = inspect.signature(Boss).parameters
    for owner in OWNERS:
        by_default = owner()
        given = owner(**{f.name: _setting(f, parameters[f.name].default) for f in fields(owner)})
        assert given == by_default, owner.__name__
        for f in fields(owner):
            if "option" not in f.metadata:  # converted otherwise (reindex)
                assert parameters[f.name].default == getattr(by_default, f.name), f.name
