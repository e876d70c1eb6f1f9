"""A standing check on every public verb of ``Boss`` and ``SyncBoss``: generated names,
payloads, keys, numbers and option combinations, mostly of a valid shape and mixed with
hostile values (lone surrogates, NUL, strings of a few MiB, data nested a thousand
levels, NaN, infinities, 1e13, integers beyond int4 and int8, wrong types, bools for
integers, unknown options, far-off datetimes, huge timedeltas).

The property: a call either succeeds, or raises a ``qcore.errors`` type that is not a
database error (a ``DatabaseError`` means the bad value reached the database) and leaves
the schema as it was (no row inserted, changed or deleted, no table created). Never a
driver error, a raw Python error or a half-written state.

Bounded and reproducible: a fixed seed (``derandomize``), no example database, a fixed
number of examples per verb; the constructor options of ``Boss`` are checked the same
way (a bad one is a ``ConfigError`` at construction, never an error at ``start()``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import hashlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from qcore import Boss, SyncBoss
from qcore.errors import ConfigError, DatabaseError, QcoreError
from qcore.identifiers import quote

pytestmark = [pytest.mark.postgres, pytest.mark.feature("errors")]

INT4_MAX = 2**31 - 1
UTC = dt.timezone.utc


def checked(max_examples: int) -> settings:
    """The fixed-seed, bounded settings of every property here."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


# --------------------------------------------------------------------------- hostile values


class Big(str):
    """A long string that prints as how it was made (failure reports stay readable)."""

    how: str

    def __new__(cls, unit: str, times: int) -> Big:
        made = super().__new__(cls, unit * times)
        made.how = f"{unit!r} * {times}"
        return made

    def __repr__(self) -> str:
        return f"({self.how})"


class Noise(str):
    """An incompressible ASCII string of ``size`` characters (hex of chained digests)."""

    size: int

    def __new__(cls, size: int) -> Noise:
        parts: list[str] = []
        block = b"qcore"
        while sum(len(part) for part in parts) < size:
            block = hashlib.sha256(block).digest()
            parts.append(block.hex())
        made = super().__new__(cls, "".join(parts)[:size])
        made.size = size
        return made

    def __repr__(self) -> str:
        return f"Noise({self.size})"


class Deep(dict):  # type: ignore[type-arg]
    """``{"k": {"k": ... [] ...}}`` nested ``depth`` levels, printed short."""

    depth: int

    def __repr__(self) -> str:
        return f"Deep({self.depth})"


class DeepList(list):  # type: ignore[type-arg]
    """``[[[ ... ]]]`` nested ``depth`` levels, printed short."""

    depth: int

    def __repr__(self) -> str:
        return f"DeepList({self.depth})"


def deep(depth: int, as_list: bool) -> Any:
    inner: Any = []
    for _ in range(depth - 1):
        inner = [inner] if as_list else {"k": inner}
    made: Any = DeepList([inner]) if as_list else Deep(k=inner)
    made.depth = depth
    return made


class ManyIds(list):  # type: ignore[type-arg]
    """``count`` distinct job ids, printed short."""

    def __init__(self, count: int) -> None:
        super().__init__(uuid.UUID(int=i) for i in range(count))

    def __repr__(self) -> str:
        return f"ManyIds({len(self)})"


class Huge(int):
    """10 ** ``digits``: an integer too long for Python's default int-to-text limit."""

    def __new__(cls, digits: int) -> Huge:
        return super().__new__(cls, 10**digits)

    def __repr__(self) -> str:
        return "Huge(10 ** 5000)"


MANY_IDS = ManyIds(70_000)


class Opaque:
    """An object no layer knows (a stand-in for a wrong type)."""

    def __repr__(self) -> str:
        return "Opaque()"


NAN, INF = float("nan"), float("inf")
HOSTILE_FLOATS = [NAN, INF, -INF, 1e13, -1e13, 1e308, -0.0, 0.5, 5e-324]
HOSTILE_INTS = [
    -1,
    0,
    1,
    INT4_MAX,
    INT4_MAX + 1,
    -(2**31),
    -(2**31) - 1,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    10**30,
]
WRONG_TYPES: list[Any] = [
    None,
    True,
    False,
    "1",
    "",
    b"x",
    [],
    {},
    (),
    Opaque(),
    1.5,
    uuid.UUID(int=7),
]
HOSTILE_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "a\udfffb",
    "\udbff\udfff",
    "\U0001f600",
    "é",
    "'",
    '"',
    "\\",
    "%s",
    "$1",
    "?",
    "\u2028",
    "a" * 256,
]

bools = st.booleans()
hostile_numbers = st.one_of(
    st.sampled_from(HOSTILE_INTS), st.sampled_from(HOSTILE_FLOATS), st.sampled_from(WRONG_TYPES)
)
hostile_text = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(alphabet=st.sampled_from("a\x00\ud800\udc00é\U0001f600'\"\\%"), min_size=1, max_size=6),
)
big_text = st.one_of(
    st.builds(Big, st.sampled_from(["x", "é", "\ud800"]), st.sampled_from([2**20, 3 * 2**20])),
    st.builds(Noise, st.sampled_from([9_000, 20_000])),
)
wrong_types = st.sampled_from(WRONG_TYPES)


@dataclass(frozen=True)
class Slot:
    """One argument of a verb: its valid values, and the hostile ones tried in its place."""

    valid: Any
    hostile: Any = None


def rarely(common: Any, rare: Any, one_in: int = 10) -> Any:
    """``common``, but ``rare`` about one time in ``one_in``."""
    return st.integers(0, one_in - 1).flatmap(lambda i: rare if i == 0 else common)


def slot(valid: Any, *hostile: Any) -> Slot:
    return Slot(valid, st.one_of(*hostile) if hostile else None)


def ints(low: int, high: int) -> Slot:
    return slot(st.integers(low, high), hostile_numbers)


def optional_ints(low: int, high: int) -> Slot:
    return slot(st.one_of(st.none(), st.integers(low, high)), hostile_numbers)


def floats(low: float, high: float) -> Slot:
    return slot(st.floats(low, high), hostile_numbers)


FLAG = slot(bools, st.sampled_from([0, 1, None, "true", "yes"]))
TEXT = slot(st.text(min_size=1, max_size=10), hostile_text, big_text, wrong_types)
OPTIONAL_TEXT = slot(st.one_of(st.none(), st.text(min_size=1, max_size=10)), hostile_text, big_text)

plain_data = rarely(
    st.recursive(
        st.one_of(
            st.none(),
            bools,
            st.integers(-(2**63), 2**63),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(max_size=10),
        ),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=8,
    ),
    st.one_of(st.just({"blob": Big("é", 2**20)}), st.builds(deep, st.just(100), bools)),
)
hostile_data = st.one_of(
    st.builds(deep, st.sampled_from([340, 1000]), bools),
    st.builds(lambda text: {"k": text}, hostile_text),
    st.builds(lambda text: [text], hostile_text),
    st.builds(lambda text: {text: 1}, hostile_text),
    st.builds(lambda text: {"blob": text}, big_text),
    st.sampled_from(
        [
            {"n": NAN},
            [INF],
            {"n": Huge(5000)},
            b"bytes",
            {(1, 2): 3},
            {1.5: 1},
            {Opaque(): 1},
            {1, 2},
            Opaque(),
            dt.date(2020, 1, 1),
        ]
    ),
)
DATA = slot(plain_data, hostile_data)

aware_datetimes = st.datetimes(
    min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC)
)
far_datetimes = st.one_of(
    st.datetimes(),  # naive
    st.sampled_from(
        [
            dt.datetime.min.replace(tzinfo=UTC),
            dt.datetime.max.replace(tzinfo=UTC),
            dt.datetime.max.replace(tzinfo=dt.timezone(-dt.timedelta(hours=23, minutes=59))),
            dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=23, minutes=59))),
        ]
    ),
    st.datetimes(timezones=st.just(UTC)),
)
DATETIME = slot(aware_datetimes, far_datetimes, wrong_types)
OPTIONAL_DATETIME = slot(st.one_of(st.none(), aware_datetimes), far_datetimes, wrong_types)
START_AFTER = slot(
    st.one_of(
        st.integers(0, 10**6),
        st.floats(0, 10**6),
        st.timedeltas(min_value=dt.timedelta(0), max_value=dt.timedelta(days=30)),
        aware_datetimes,
        st.sampled_from(["2030-01-01T08:00:00Z", "2030-01-01", "2030-01-01T08:00:00+05:30"]),
    ),
    hostile_numbers,
    far_datetimes,
    st.sampled_from(
        [dt.timedelta.max, dt.timedelta.min, dt.timedelta(days=10**6), -dt.timedelta(seconds=1)]
    ),
    st.sampled_from(
        [
            "9999-12-31T23:59:59+00:00",
            "0001-01-01T00:00:00-23:59",
            "not a date",
            "2030-13-45",
            "2030-01-01T00:00:00\x00",
        ]
    ),
    hostile_text,
)

SEEDED = ("q", "q_fifo", "dlq")
fresh_names = st.from_regex(r"[a-z][a-z0-9_.\-/]{0,10}", fullmatch=True)
hostile_names = st.one_of(
    st.sampled_from(["", "bad name!", "é", "a" * 256, "q\x00", "\ud800", " q", "Q", "q\n"]),
    wrong_types,
    hostile_text,
    big_text,
)
NAME = slot(st.one_of(st.sampled_from(SEEDED), st.sampled_from(SEEDED), fresh_names), hostile_names)
FRESH_NAME = slot(fresh_names, hostile_names)
OPTIONAL_NAME = slot(st.one_of(st.none(), NAME.valid), hostile_names)

bad_ids = st.one_of(
    st.sampled_from(["not-a-uuid", "", "00000000-0000-0000-0000-00000000000g", 1, None, b"x"]),
    hostile_text,
    wrong_types,
)


def job_id(seed: Seed) -> Slot:
    return slot(
        st.one_of(st.sampled_from(seed.ids), st.uuids(), st.builds(str, st.uuids())), bad_ids
    )


def job_ids(seed: Seed) -> Slot:
    one = job_id(seed).valid
    return slot(
        st.one_of(one, st.lists(one, min_size=1, max_size=4)),
        bad_ids,
        st.sampled_from([[], [None], {"id": 1}, b"x", 12, ["x", 1]]),
        st.just(MANY_IDS),
    )


def send_option_slots(seed: Seed) -> dict[str, Slot]:
    return {
        "priority": ints(-(2**31), INT4_MAX),
        "start_after": START_AFTER,
        "singleton_key": TEXT,
        "singleton_seconds": ints(1, INT4_MAX),
        "singleton_next_slot": FLAG,
        "retry_limit": ints(0, INT4_MAX),
        "retry_delay": ints(0, INT4_MAX),
        "retry_backoff": FLAG,
        "retry_delay_max": ints(0, INT4_MAX),
        "expire_in_seconds": ints(1, 86_400),
        "retention_seconds": ints(1, INT4_MAX),
        "delete_after_seconds": ints(0, INT4_MAX),
        "heartbeat_seconds": ints(10, INT4_MAX),
        "dead_letter": NAME,
        "id": job_id(seed),
        "group_id": TEXT,
        "group_tier": TEXT,
    }


def with_pattern(options: dict[str, Slot]) -> dict[str, Slot]:
    return {
        **options,
        "preferred_instance_key_pattern": slot(
            st.sampled_from(["^web-", "web-.*", ".*"]),
            st.sampled_from(["(", "[", "*", "\\", "(?P<x", "a{99999999999}"]),
            hostile_text,
            wrong_types,
        ),
    }


def edit_option_slots(seed: Seed) -> dict[str, Slot]:
    options = send_option_slots(seed)
    for gone in ("singleton_key", "singleton_seconds", "singleton_next_slot", "id"):
        del options[gone]
    return options


def queue_option_slots(update: bool) -> dict[str, Slot]:
    nullable = st.none() if update else st.nothing()
    return {
        "policy": slot(
            st.sampled_from(["standard", "short", "singleton", "stately", "exclusive"]),
            st.sampled_from(["STANDARD", "", None, 1, "key_strict_fifo "]),
            hostile_text,
        ),
        "partition": FLAG,
        "retry_limit": ints(0, INT4_MAX),
        "retry_delay": ints(0, INT4_MAX),
        "retry_backoff": FLAG,
        "retry_delay_max": slot(st.one_of(nullable, st.integers(0, INT4_MAX)), hostile_numbers),
        "expire_in_seconds": ints(1, 86_400),
        "retention_seconds": ints(1, INT4_MAX),
        "delete_after_seconds": ints(0, INT4_MAX),
        "warning_queue_size": ints(1, INT4_MAX),
        "dead_letter": NAME,
        "heartbeat_seconds": slot(st.one_of(nullable, st.integers(10, INT4_MAX)), hostile_numbers),
        "notify": FLAG,
    }


def fetch_option_slots() -> dict[str, Slot]:
    limit = st.integers(1, 5)
    return {
        "batch_size": ints(1, 50),
        "priority": FLAG,
        "order_by_created_on": FLAG,
        "include_metadata": FLAG,
        "ignore_start_after": FLAG,
        "min_priority": optional_ints(-(2**31), INT4_MAX),
        "max_priority": optional_ints(-(2**31), INT4_MAX),
        "group_concurrency": slot(
            st.one_of(
                st.none(),
                limit,
                st.fixed_dictionaries(
                    {"default": limit},
                    optional={"tiers": st.dictionaries(st.text(min_size=1, max_size=5), limit)},
                ),
            ),
            hostile_numbers,
            st.builds(lambda t: {"default": 1, "tiers": {t: 1}}, hostile_text),
            st.sampled_from([{"tiers": {"a": 1}}, {"default": 1, "tiers": [1]}, {"x": 1}]),
        ),
        "ignore_groups": slot(
            st.one_of(st.none(), st.lists(st.text(min_size=1, max_size=5), max_size=3)),
            st.lists(hostile_text, min_size=1, max_size=2),
            st.sampled_from(["group", b"x", 1, [None]]),
        ),
    }


def work_option_slots() -> dict[str, Slot]:
    return {
        **fetch_option_slots(),
        "local_concurrency": ints(1, 4),
        "polling_interval_seconds": floats(0.5, 10),
        "heartbeat_refresh_seconds": slot(st.one_of(st.none(), st.floats(1, 10)), hostile_numbers),
        "notify_polling_interval_seconds": slot(
            st.one_of(st.none(), st.floats(1, 60)), hostile_numbers
        ),
        "per_job_results": FLAG,
        "burst_when_ready_exceeds": optional_ints(1, 100),
        "burst_when_batch_full": FLAG,
        "locked_fetch": FLAG,
        "local_group_concurrency": optional_ints(1, 4),
    }


def before_slot(seed: Seed) -> Slot:
    return slot(
        st.one_of(st.none(), st.tuples(aware_datetimes, job_id(seed).valid)),
        st.tuples(far_datetimes, job_id(seed).valid),
        st.tuples(aware_datetimes, bad_ids),
        st.sampled_from([(), ("x", "y"), (1, 2, 3), "x"]),
    )


STATES = slot(
    st.one_of(
        st.none(),
        st.lists(
            st.sampled_from(["created", "retry", "active", "completed", "cancelled", "failed"]),
            max_size=3,
        ),
    ),
    st.lists(hostile_text, min_size=1, max_size=2),
    st.sampled_from(["created", [None], [1], "x"]),
)
unknown_options = st.sampled_from(
    [{"colour_of_the_sky": "blue"}, {"retryLimit": 1}, {"singletonKey": "k"}, {"": 1}]
)
bad_dbs = st.sampled_from([Opaque(), 1, "postgresql://nowhere/x"])


@st.composite
def calls(
    draw: Any,
    positional: tuple[Slot, ...] = (),
    options: dict[str, Slot] | None = None,
    *,
    db: bool = True,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call: valid values in each positional slot and in a few options, then at most one
    slot given a hostile value (so no other check stops the call before it), and now and
    then an unknown option or a bad ``db=``."""
    options = options or {}
    args = [draw(s.valid) for s in positional]
    names = sorted(options)
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=4)) if names else []
    kwargs = {name: draw(options[name].valid) for name in chosen}
    targets: list[int | str] = [i for i, s in enumerate(positional) if s.hostile is not None]
    targets += [name for name in names if options[name].hostile is not None]
    pick = draw(st.one_of(st.none(), st.sampled_from(targets))) if targets else None
    if isinstance(pick, int):
        args[pick] = draw(positional[pick].hostile)
    elif pick is not None:
        kwargs[pick] = draw(options[pick].hostile)
    extra = draw(st.integers(0, 9))
    if extra == 0:
        kwargs.update(draw(unknown_options))
    elif extra == 1 and db:
        kwargs["db"] = draw(bad_dbs)
    return tuple(args), kwargs


@dataclass
class Seed:
    """What the seeded schema holds: ids of its jobs and jobs fetched from it."""

    ids: list[uuid.UUID] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)


def verbs(seed: Seed) -> dict[str, tuple[Any, int]]:
    """Each verb's strategy of calls and its number of examples."""
    one_id, ids = job_id(seed), job_ids(seed)
    send_options = with_pattern(send_option_slots(seed))
    edit_options = edit_option_slots(seed)
    fetch_options = fetch_option_slots()
    jobs_done = slot(
        st.lists(st.sampled_from(seed.jobs), max_size=2),
        st.lists(one_id.valid, min_size=1, max_size=2),
        st.sampled_from([None, "x", [1]]),
    )
    cron = slot(
        st.sampled_from(["* * * * *", "*/5 * * * *", "0 0 * * 0", "0 */2 * * * *"]),
        st.sampled_from(
            ["* * *", "61 * * * *", "@reboot", "* * * * * * *", "0 0 30 2 *", "", None]
        ),
        hostile_text,
        big_text,
    )
    tz = slot(
        st.sampled_from(["UTC", "Europe/Paris", "America/St_Johns", "Asia/Kathmandu"]),
        st.sampled_from(["Not/AZone", "+05:00", "", None, 5, "../../etc/passwd"]),
        hostile_text,
    )
    schedule_key = slot(st.sampled_from(["", "k", "nightly"]), hostile_text, big_text, wrong_types)
    match = slot(st.sampled_from(["newest", "oldest", "all"]), hostile_text, wrong_types)
    edit_by = {"id": one_id, "singleton_key": TEXT, "match": match}
    send_slots = send_option_slots(seed)
    job_spec = st.fixed_dictionaries(
        {"ref": st.sampled_from(["a", "b", "c"]), "name": NAME.valid},
        optional={
            "data": plain_data,
            "options": st.fixed_dictionaries(
                {}, optional={k: v.valid for k, v in send_slots.items() if k != "id"}
            ),
            "depends_on": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2),
        },
    )
    flow_jobs = slot(
        st.lists(job_spec, min_size=2, max_size=3),
        st.builds(
            lambda jobs, key, value: [{**jobs[0], key: value}, *jobs[1:]],
            st.lists(job_spec, min_size=2, max_size=3),
            st.sampled_from(["ref", "name", "data", "options", "depends_on", "colour"]),
            st.one_of(hostile_text, hostile_data, wrong_types),
        ),
        st.sampled_from([None, [], "x", [{}], [1, 2]]),
    )
    insert_jobs = slot(
        st.lists(
            st.builds(
                lambda d, o: {"data": d, **o},
                plain_data,
                st.fixed_dictionaries({}, optional={k: v.valid for k, v in send_slots.items()}),
            ),
            min_size=1,
            max_size=3,
        ),
        st.builds(
            lambda key, value: [{"data": 1}, {key: value}],
            st.sampled_from(sorted(send_slots)),
            st.one_of(hostile_numbers, hostile_text, big_text),
        ),
        st.builds(lambda d: [{"data": d}], hostile_data),
        st.sampled_from([[], None, "x", [1], [{"colour": 1}], {"data": 1}]),
    )
    thresholds = slot(
        st.one_of(
            bools,
            st.fixed_dictionaries(
                {},
                optional={
                    "min_pages": st.integers(1, 100),
                    "max_entries_per_page": st.floats(0.1, 100),
                    "min_size_ratio": st.floats(1.0, 10),
                    "max_index_bytes": st.integers(1, 10**9),
                    "force": bools,
                },
            ),
        ),
        st.builds(
            lambda k, v: {k: v},
            st.sampled_from(["min_pages", "min_size_ratio", "force", "x"]),
            hostile_numbers,
        ),
        st.sampled_from([None, "x", 1]),
    )
    instance_key = slot(st.sampled_from(["web-1", "worker-a"]), hostile_text, big_text, wrong_types)
    ref = slot(
        st.one_of(st.none(), st.tuples(NAME.valid, one_id.valid)),
        st.tuples(hostile_names, one_id.valid),
        st.tuples(NAME.valid, bad_ids),
        st.sampled_from(["x", (1,), ("q",)]),
    )
    handler = slot(st.just(noop), st.sampled_from([None, 1, "handler"]))
    return {
        "create_queue": (calls((FRESH_NAME,), queue_option_slots(False)), 120),
        "update_queue": (calls((NAME,), queue_option_slots(True)), 150),
        "delete_queue": (calls((FRESH_NAME,)), 60),
        "get_queue": (calls((NAME,)), 60),
        "get_queues": (
            calls(
                (
                    slot(
                        st.one_of(st.none(), st.lists(NAME.valid, max_size=3)),
                        hostile_names,
                        st.lists(hostile_names, min_size=1, max_size=2),
                    ),
                )
            ),
            60,
        ),
        "delete_queued_jobs": (calls((FRESH_NAME,)), 60),
        "delete_stored_jobs": (calls((FRESH_NAME,)), 60),
        "delete_all_jobs": (calls((FRESH_NAME,)), 60),
        "get_blocked_keys": (calls((NAME,)), 60),
        "send": (calls((NAME, DATA), send_options), 300),
        "send_after": (
            calls(
                (NAME, DATA, START_AFTER),
                send_option_slots(seed) | {"start_after": Slot(st.nothing())},
            ),
            150,
        ),
        "send_throttled": (
            calls((NAME, DATA, ints(1, INT4_MAX), OPTIONAL_TEXT), send_options),
            150,
        ),
        "send_debounced": (
            calls((NAME, DATA, ints(1, INT4_MAX), OPTIONAL_TEXT), send_options),
            150,
        ),
        "insert": (calls((NAME, insert_jobs), {"return_id": FLAG}), 200),
        "update": (calls((NAME, DATA), edit_by | edit_options), 150),
        "upsert": (calls((NAME, DATA), edit_by | edit_options), 150),
        "redrive": (
            calls(
                (NAME,),
                {
                    "destination": OPTIONAL_NAME,
                    "source_name": OPTIONAL_NAME,
                    "data": slot(
                        st.one_of(
                            st.none(), st.dictionaries(st.text(max_size=4), plain_data, max_size=2)
                        ),
                        hostile_data,
                    ),
                    "created_before": OPTIONAL_DATETIME,
                    "ids": ids,
                    "limit": ints(1, 100_000),
                },
            ),
            100,
        ),
        "subscribe": (
            calls(
                (slot(st.sampled_from(["ev", "ev2"]), hostile_text, big_text, wrong_types), NAME)
            ),
            100,
        ),
        "unsubscribe": (
            calls(
                (slot(st.sampled_from(["ev2", "none"]), hostile_text, big_text, wrong_types), NAME)
            ),
            60,
        ),
        "publish": (
            calls(
                (
                    slot(
                        st.sampled_from(["ev", "ev2", "none"]), hostile_text, big_text, wrong_types
                    ),
                    DATA,
                ),
                send_options,
            ),
            200,
        ),
        "fetch": (calls((NAME,), fetch_options), 120),
        "complete": (calls((NAME, ids, DATA), {"include_queued": FLAG}), 150),
        "complete_and_fetch": (calls((NAME, jobs_done), fetch_options), 80),
        "locked_fetch": (calls((NAME,), fetch_options), 80),
        "fail": (calls((NAME, ids, DATA)), 150),
        "cancel": (calls((NAME, ids)), 60),
        "restore": (calls((NAME, ids)), 60),
        "resume": (calls((NAME, ids)), 60),
        "retry": (calls((NAME, ids)), 60),
        "delete_job": (calls((NAME, ids)), 60),
        "touch": (calls((NAME, ids)), 60),
        "get_job_by_id": (calls((NAME, one_id)), 60),
        "find_jobs": (
            calls(
                (NAME,),
                {
                    "id": slot(st.one_of(st.none(), one_id.valid), bad_ids),
                    "key": OPTIONAL_TEXT,
                    "data": DATA,
                    "queued": FLAG,
                    "states": STATES,
                    "limit": optional_ints(1, 100_000),
                },
            ),
            150,
        ),
        "browse_jobs": (
            calls(
                (NAME,),
                {
                    "states": STATES,
                    "key": OPTIONAL_TEXT,
                    "data": DATA,
                    "before": before_slot(seed),
                    "limit": ints(1, 1000),
                },
            ),
            150,
        ),
        "get_instances": (
            calls(
                (),
                {
                    "limit": ints(1, 100_000),
                    "after": slot(st.one_of(st.none(), one_id.valid), bad_ids),
                    "offset": optional_ints(0, 100),
                },
            ),
            60,
        ),
        "pause_instance": (calls((instance_key,)), 60),
        "resume_instance": (calls((instance_key,)), 60),
        "remove_instance": (calls((instance_key,)), 60),
        "get_queue_stats": (
            calls(
                (NAME,),
                {
                    "from_": OPTIONAL_DATETIME,
                    "to": OPTIONAL_DATETIME,
                    "limit": ints(1, 100_000),
                    "bucket_seconds": optional_ints(1, 86_400),
                    "max_data_points": optional_ints(1, 10_000),
                    "aggregate": slot(
                        st.sampled_from(["max", "min", "avg"]), hostile_text, wrong_types
                    ),
                    "force": FLAG,
                },
            ),
            100,
        ),
        "get_warnings": (calls((), {"limit": ints(1, 1000), "before": before_slot(seed)}), 60),
        "supervise": (calls((OPTIONAL_NAME,), {"reindex": thresholds}, db=False), 30),
        "get_reindex_commands": (
            calls(
                (),
                {
                    "force": FLAG,
                    "min_pages": optional_ints(1, 100),
                    "max_entries_per_page": slot(
                        st.one_of(st.none(), st.floats(0.1, 100)), hostile_numbers
                    ),
                    "min_size_ratio": slot(
                        st.one_of(st.none(), st.floats(1.0, 10)), hostile_numbers
                    ),
                    "max_index_bytes": optional_ints(1, 10**9),
                },
                db=False,
            ),
            60,
        ),
        "schedule": (
            calls(
                (NAME, cron, DATA),
                {
                    "tz": tz,
                    "key": schedule_key,
                    "missed": slot(
                        st.sampled_from(["skip", "once", None]), hostile_text, wrong_types
                    ),
                    **{k: v for k, v in send_slots.items() if k not in ("id", "start_after")},
                },
            ),
            150,
        ),
        "unschedule": (calls((NAME, schedule_key)), 60),
        "get_schedules": (
            calls(
                (
                    OPTIONAL_NAME,
                    slot(st.one_of(st.none(), schedule_key.valid), hostile_text, wrong_types),
                ),
                {
                    "limit": ints(1, 100_000),
                    "after": slot(
                        st.one_of(st.none(), st.tuples(NAME.valid, schedule_key.valid)),
                        st.tuples(hostile_names, hostile_text),
                        st.sampled_from(["x", (1,), ("q",)]),
                    ),
                },
            ),
            60,
        ),
        "flow": (calls((flow_jobs,)), 150),
        "get_dependencies": (calls((NAME, one_id), {"limit": ints(1, 100_000), "after": ref}), 60),
        "get_dependents": (calls((NAME, one_id), {"limit": ints(1, 100_000), "after": ref}), 60),
        "resolve_flow": (calls(db=False), 10),
        "detect_schema_drift": (calls(), 10),
        "get_bam_status": (calls(), 10),
        "get_bam_entries": (
            calls(
                (),
                {
                    "limit": ints(1, 100_000),
                    "after": slot(st.one_of(st.none(), one_id.valid), bad_ids),
                },
            ),
            60,
        ),
        "is_installed": (calls(db=False), 10),
        "schema_version": (calls(db=False), 10),
        "work": (calls((NAME, handler), work_option_slots(), db=False), 60),
        "work_handlers": (
            calls(
                (
                    slot(
                        st.one_of(st.none(), st.just(["q"])),
                        st.lists(hostile_names, min_size=1, max_size=2),
                        hostile_text,
                    ),
                ),
                {"local_concurrency": optional_ints(1, 4)},
                db=False,
            ),
            30,
        ),
        "off_work": (
            calls((OPTIONAL_NAME,), {"id": OPTIONAL_TEXT, "wait": FLAG}, db=False),
            60,
        ),
        "add_service": (
            calls((slot(st.sampled_from([None, 1, "service", Opaque()])),), db=False),
            10,
        ),
        "start": (calls((), {"attempts": ints(1, 3)}, db=False), 30),
        # a good call stops the Boss, which starts again: mostly bad timeouts
        "stop": (
            calls(
                (),
                {
                    "graceful": FLAG,
                    "close": FLAG,
                    "timeout": slot(
                        st.sampled_from([0, 5.0]), hostile_numbers, st.sampled_from([NAN, INF, -1])
                    ),
                },
                db=False,
            ),
            20,
        ),
    }


async def noop(jobs: Any) -> None:
    return None


# --------------------------------------------------------------------------- the fixtures


def fingerprint_sql(conn: psycopg.Connection[Any], schema: str) -> str:
    """One statement: every visible row of the schema's tables (its table, place and
    writing transaction, so an insert, update or delete changes it) and its table list."""
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace"
            " AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1",
            (quote(schema),),
        ).fetchall()
    ]
    rows = " UNION ALL ".join(
        f"SELECT tableoid::regclass::text || ctid::text || xmin::text AS r"
        f" FROM {quote(schema)}.{quote(t)}"
        for t in tables
    )
    return (
        f"SELECT (SELECT count(*) || ':' || md5(string_agg(r, ',' ORDER BY r)) FROM ({rows}) s),"
        " (SELECT md5(string_agg(relname::text || relkind::text, ',' ORDER BY relname))"
        f" FROM pg_class WHERE relnamespace = '{quote(schema)}'::regnamespace)"
    )


@dataclass
class Target:
    """A started Boss or SyncBoss, a way to run its verbs and its schema's fingerprint."""

    name: str
    boss: Any
    run: Callable[[Callable[[], Any]], Any]
    seed: Seed
    fingerprint: Callable[[], tuple[Any, ...]]
    workers: Callable[[], int]
    restart: Callable[[], None]


OPTIONS = {"supervise": False, "schedule": False, "register_instance": False}
QUIET = {"flow_interval_seconds": 86_400.0, "bam_interval_seconds": 86_400.0}


def seed_schema(run: Callable[[Callable[[], Any]], Any], boss: Any) -> Seed:
    seed = Seed()
    run(lambda: boss.create_queue("dlq"))
    run(lambda: boss.create_queue("q", retry_limit=2, dead_letter="dlq"))
    run(lambda: boss.create_queue("q_fifo", policy="key_strict_fifo"))
    run(lambda: boss.create_queue("q_retry"))
    for i in range(6):
        seed.ids.append(run(functools.partial(boss.send, "q", {"n": i}, singleton_key=f"k{i}")))
    seed.ids.append(run(lambda: boss.send("q_fifo", {"n": 0}, singleton_key="fifo")))
    seed.jobs = list(run(lambda: boss.fetch("q", batch_size=2)))
    run(lambda: boss.subscribe("ev", "q"))
    run(lambda: boss.schedule("q", "*/5 * * * *", {"cron": True}))
    boss.handler("q")(noop)
    return seed


@pytest.fixture(scope="module")
def admin(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def _fingerprinter(admin: psycopg.Connection[Any], schema: str) -> Callable[[], tuple[Any, ...]]:
    sql = fingerprint_sql(admin, schema)
    return lambda: tuple(admin.execute(sql).fetchone() or ())


@pytest.fixture(scope="module")
def async_target(pg_dsn: str, admin: psycopg.Connection[Any]) -> Iterator[Target]:
    schema = f"qcore_props_{uuid.uuid4().hex[:8]}"
    loop = asyncio.new_event_loop()
    boss = Boss(pg_dsn, schema=schema, **OPTIONS, **QUIET)  # type: ignore[arg-type]

    def run(make: Callable[[], Any]) -> Any:
        made = make()
        return loop.run_until_complete(made) if asyncio.iscoroutine(made) else made

    run(boss.start)
    seed = seed_schema(run, boss)
    try:
        yield Target(
            "Boss",
            boss,
            run,
            seed,
            _fingerprinter(admin, schema),
            lambda: len(boss.worker_statuses()),
            lambda: run(boss.start),
        )
    finally:
        run(lambda: boss.stop(graceful=False))
        loop.close()
        admin.execute(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")


@pytest.fixture(scope="module")
def sync_target(pg_dsn: str, admin: psycopg.Connection[Any]) -> Iterator[Target]:
    schema = f"qcore_props_{uuid.uuid4().hex[:8]}"
    boss = SyncBoss(pg_dsn, schema=schema, **OPTIONS, **QUIET)  # type: ignore[arg-type]

    def run(make: Callable[[], Any]) -> Any:
        return make()

    def restart() -> None:
        boss.start()

    boss.start()
    seed = seed_schema(run, boss)
    try:
        yield Target(
            "SyncBoss",
            boss,
            run,
            seed,
            _fingerprinter(admin, schema),
            lambda: len(boss.worker_statuses()),
            restart,
        )
    finally:
        boss.close(graceful=False)
        admin.execute(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")


# --------------------------------------------------------------------------- the property


def describe(exc: BaseException) -> str:
    state = getattr(exc, "sqlstate", None)
    return (
        f"{type(exc).__module__}.{type(exc).__qualname__}{f' [{state}]' if state else ''}: {exc}"[
            :600
        ]
    )


def invoke(target: Target, verb: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one verb call the way a user writes it."""
    boss = target.boss
    if verb == "locked_fetch":
        if target.name == "SyncBoss":

            def held() -> None:
                with boss.locked_fetch(*args, **kwargs):
                    pass

            return held()

        async def held_async() -> None:
            async with boss.locked_fetch(*args, **kwargs):
                pass

        return target.run(held_async)
    return target.run(lambda: getattr(boss, verb)(*args, **kwargs))


def after_success(target: Target, verb: str, result: Any) -> None:
    """Undo what a successful call left running (workers, a stopped Boss)."""
    if verb == "work":
        target.run(lambda: target.boss.off_work(id=result))
    elif verb == "work_handlers":
        for worker in result:
            target.run(functools.partial(target.boss.off_work, id=worker))
    elif verb == "stop":
        target.restart()


_FAILURES: dict[str, type[AssertionError]] = {}


def failure(kind: str) -> type[AssertionError]:
    """An AssertionError class per kind of failure, so that Hypothesis reports (and
    shrinks) each kind found in one test on its own."""
    name = "".join(c if c.isalnum() else "_" for c in kind)
    return _FAILURES.setdefault(name, type(name, (AssertionError,), {}))


def check_call(target: Target, verb: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The property: success, or an allowed qcore error with nothing written."""
    before, workers = target.fingerprint(), target.workers()
    try:
        result = invoke(target, verb, args, kwargs)
    except QcoreError as exc:
        if isinstance(exc, DatabaseError):  # the bad value reached the database
            raise failure(f"DatabaseError_{exc.sqlstate}")(
                f"{target.name}.{verb} let a bad value reach the database: {describe(exc)}"
            ) from exc
        after = target.fingerprint()
        if after != before or target.workers() != workers:
            raise failure(f"WroteThenRaised_{type(exc).__name__}")(
                f"{target.name}.{verb} raised {describe(exc)} but wrote to the schema"
                f" (or left a worker running)"
            ) from exc
        return
    except Exception as exc:
        raise failure(f"RawError_{type(exc).__name__}")(
            f"{target.name}.{verb} raised an error outside qcore.errors: {describe(exc)}"
        ) from exc
    after_success(target, verb, result)


VERBS = sorted(verbs(Seed(ids=[uuid.UUID(int=1)], jobs=[None])))


#: the examples of each verb that takes arguments to vary; a verb listed with :data:`FEW`
#: or fewer (no arguments, or a pass over the whole schema) runs those
PER_VERB = 200
FEW = 30


@pytest.mark.parametrize("verb", VERBS)
def test_boss_verb_succeeds_or_refuses_cleanly(async_target: Target, verb: str) -> None:
    strategy, examples = verbs(async_target.seed)[verb]

    @checked(max(PER_VERB, examples) if examples > FEW else examples)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        args, kwargs = data.draw(strategy, label="args, kwargs")
        check_call(async_target, verb, args, kwargs)

    check()


@pytest.mark.parametrize("verb", VERBS)
def test_sync_boss_verb_succeeds_or_refuses_cleanly(sync_target: Target, verb: str) -> None:
    strategy, examples = verbs(sync_target.seed)[verb]

    @checked(max(5, examples // 8))  # the same Boss coroutines, through the loop thread
    @given(st.data())
    def check(data: st.DataObject) -> None:
        args, kwargs = data.draw(strategy, label="args, kwargs")
        check_call(sync_target, verb, args, kwargs)

    check()


# --------------------------------------------------------------------------- failing again


retry_options = st.fixed_dictionaries(
    {
        "retry_limit": st.integers(0, 20),
        "retry_delay": st.one_of(
            st.integers(0, 3600), st.sampled_from([86_400, 10**6, 10**8, INT4_MAX])
        ),
        "retry_backoff": bools,
    },
    optional={"retry_delay_max": st.integers(0, INT4_MAX)},
)


@pytest.mark.parametrize("which", ["Boss", "SyncBoss"])
def test_a_job_failed_again_and_again_is_retried_or_refused_cleanly(
    async_target: Target, sync_target: Target, which: str
) -> None:
    """Every retry a job's options allow (backoff doubling the delay each time) is
    scheduled, or the option was refused when the job was sent: a later ``fail`` never
    raises a database error."""
    target = async_target if which == "Boss" else sync_target
    boss = target.boss

    @checked(25 if which == "Boss" else 8)
    @given(retry_options)
    def check(options: dict[str, Any]) -> None:
        target.run(lambda: boss.delete_all_jobs("q_retry"))
        try:
            target.run(lambda: boss.send("q_retry", {}, **options))
        except QcoreError as exc:
            assert not isinstance(exc, DatabaseError), describe(exc)
            return
        for _ in range(options["retry_limit"] + 1):
            jobs = target.run(lambda: boss.fetch("q_retry", ignore_start_after=True))
            if not jobs:
                break
            check_call(target, "fail", ("q_retry", jobs[0]), {})

    check()


# --------------------------------------------------------------------------- constructing


CONSTRUCTOR_SCHEMA = "qcore_props_ctor"
interval = slot(st.floats(1, 86_400), hostile_numbers)
constructor_slots: dict[str, Slot] = {
    "schema": slot(
        st.just(CONSTRUCTOR_SCHEMA),
        st.sampled_from(
            [
                "pg_catalog",
                "PG_CATALOG",
                "pg_toast",
                "pg_temp",
                "pg_qcore",
                '"pg_catalog"',
                "information_schema",
                '"a b"',
                "a" * 51,
                "",
                "1abc",
                '"\x00"',
                "\ud800",
                '"\ud800"',
                '"é"',
                None,
                1,
            ]
        ),
    ),
    "max": ints(1, 10),
    "connection_timeout": slot(st.floats(1, 30), hostile_numbers, st.sampled_from([1e300, 2**63])),
    "application_name": slot(st.text(min_size=1, max_size=10), hostile_text, wrong_types),
    "supervise_interval_seconds": interval,
    "monitor_interval_seconds": interval,
    "maintenance_interval_seconds": interval,
    "queue_cache_interval_seconds": interval,
    "warning_slow_query_seconds": interval,
    "warning_queue_size": ints(1, INT4_MAX),
    "warning_retention_days": optional_ints(1, 365),
    "queue_stat_retention_days": ints(1, 365),
    "reindex_interval_seconds": interval,
    "cron_monitor_interval_seconds": interval,
    "cron_worker_interval_seconds": interval,
    "clock_monitor_interval_seconds": interval,
    "flow_interval_seconds": interval,
    "bam_interval_seconds": interval,
    "instance_heartbeat_seconds": ints(1, 3600),
    "instance_name": slot(st.one_of(st.none(), st.text(min_size=1, max_size=10)), hostile_text),
    "reindex": slot(bools, st.sampled_from([{"min_pages": -1}, {"x": 1}, "yes", 1])),
    "persist_warnings": FLAG,
    "persist_queue_stats": FLAG,
    "use_listen_notify": FLAG,
    "migrate": FLAG,
}


@st.composite
def constructions(draw: Any) -> tuple[dict[str, Any], bool]:
    """Boss options, valid but for at most one; and whether one is hostile."""
    names = sorted(constructor_slots)
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=4))
    kwargs = {name: draw(constructor_slots[name].valid) for name in chosen}
    pick = draw(st.one_of(st.none(), st.sampled_from(names)))
    if pick is not None:
        kwargs[pick] = draw(constructor_slots[pick].hostile)
    return kwargs, pick is not None


def test_boss_options_are_refused_at_construction_or_work_at_start(
    pg_dsn: str, admin: psycopg.Connection[Any]
) -> None:
    """A bad constructor option is a ``ConfigError`` raised by ``Boss(...)``; an option it
    accepted does not fail ``start()`` (tried for every accepted hostile value)."""

    @checked(150)
    @given(constructions())
    def check(made: tuple[dict[str, Any], bool]) -> None:
        kwargs, hostile = made
        options = {**OPTIONS, **QUIET, **kwargs}
        try:
            boss = Boss(pg_dsn, **options)
        except ConfigError as exc:
            if isinstance(exc, DatabaseError):
                raise failure("ConstructorDatabaseError")(describe(exc)) from exc
            return
        except Exception as exc:
            raise failure(f"RawConstructorError_{type(exc).__name__}")(describe(exc)) from exc
        if not hostile:
            return
        loop = asyncio.new_event_loop()
        try:
            try:
                loop.run_until_complete(boss.start())
            except Exception as exc:
                raise failure(f"AcceptedThenStartFailed_{type(exc).__name__}")(
                    f"Boss(**{kwargs!r}) was accepted, then start() raised {describe(exc)}"
                ) from exc
            finally:
                loop.run_until_complete(boss.stop(graceful=False))
        finally:
            loop.close()

    try:
        check()
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {quote(CONSTRUCTOR_SCHEMA)} CASCADE")


# --------------------------------------------------------------------------- plain methods


@pytest.mark.parametrize("method", ["handler", "on", "notify_worker"])
def test_plain_methods_refuse_cleanly(pg_dsn: str, method: str) -> None:
    """The methods of ``Boss`` that are not coroutines (nothing reaches the database):
    success, or a ``ValidationError``, never a raw Python error."""
    boss = Boss(pg_dsn, **OPTIONS)  # type: ignore[arg-type]
    strategies = {
        "handler": calls((NAME,), work_option_slots(), db=False),
        "on": calls(
            (
                slot(
                    st.sampled_from(["error", "warning", "wip", "stopped"]),
                    hostile_text,
                    wrong_types,
                ),
                slot(st.just(print), st.sampled_from([None, 1, "print"])),
            ),
            db=False,
        ),
        "notify_worker": calls((slot(st.text(max_size=10), wrong_types, hostile_text),), db=False),
    }

    @checked(60)
    @given(strategies[method])
    def check(made: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        args, kwargs = made
        try:
            result = getattr(boss, method)(*args, **kwargs)
            if method == "handler":
                result(noop)
        except QcoreError:
            return
        except Exception as exc:
            raise failure(f"RawError_{type(exc).__name__}")(
                f"Boss.{method} raised an error outside qcore.errors: {describe(exc)}"
            ) from exc

    check()
