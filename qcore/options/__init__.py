"""Validation of queue and job options, before anything is written.

Every check raises :class:`qcore.errors.ValidationError` with a message that
says which value was wrong and what is allowed. The rules are pg-boss's
(``Attorney``), spelled in Python: snake_case names, durations in seconds.

The functions here return plain values ready for the SQL builders: a queue's
options as the camelCase JSON object pg-boss's ``create_queue(text, jsonb)``
reads, and each job as one record of the JSON array a send or insert expands
server-side.

One module per audience, every name re-exported here:

- :mod:`qcore.options.scalars`: numbers, flags, option names (every module's ground);
- :mod:`qcore.options.text`: queue names, keys, storable text;
- :mod:`qcore.options.ids`: job ids and a page's keyset;
- :mod:`qcore.options.jsonb`: a job's data and output as jsonb;
- :mod:`qcore.options.queues`: a queue's options;
- :mod:`qcore.options.jobs`: a job's options (send, insert, edit);
- :mod:`qcore.options.fetch`: a fetch's and a worker's options.
"""

from __future__ import annotations

from qcore.options.fetch import (
    FETCH_DEFAULTS,
    FETCH_OPTIONS,
    WORK_OPTIONS,
    FetchOptions,
    GroupConcurrency,
    GroupLimits,
    WorkArguments,
    check_batch_size,
    fetch_options,
    group_limits,
    ignored_groups,
    priority_bounds,
)
from qcore.options.ids import (
    ids_and_fences,
    job_id,
    page_keyset,
)
from qcore.options.jobs import (
    EDIT_OPTIONS,
    MAX_DELAY_SECONDS,
    SEND_OPTIONS,
    EditOptions,
    JobRecord,
    ScheduledSendOptions,
    SendOptions,
    job_record,
)
from qcore.options.jsonb import (
    MAX_JSON_DEPTH,
    check_json,
    normalize_output,
    payloads_json,
    records_json,
)
from qcore.options.queues import (
    MAX_EXPIRE_SECONDS,
    MIN_HEARTBEAT_SECONDS,
    QUEUE_OPTIONS,
    QueueOptions,
    lifetime_fields,
    policy,
    queue_options,
    queue_options_json,
    retry_fields,
)
from qcore.options.scalars import (
    INT4_MAX,
    INT4_MIN,
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    check_count,
    check_flag,
    check_int,
    check_number,
    check_seconds,
    known_only,
)
from qcore.options.text import (
    MAX_KEY_BYTES,
    MAX_QUEUE_NAME_LENGTH,
    check_key,
    check_text,
    queue_name,
    storable_text,
    text_problem,
)

__all__ = [
    "EDIT_OPTIONS",
    "FETCH_DEFAULTS",
    "FETCH_OPTIONS",
    "INT4_MAX",
    "INT4_MIN",
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "MAX_DELAY_SECONDS",
    "MAX_EXPIRE_SECONDS",
    "MAX_JSON_DEPTH",
    "MAX_KEY_BYTES",
    "MAX_QUEUE_NAME_LENGTH",
    "MIN_HEARTBEAT_SECONDS",
    "QUEUE_OPTIONS",
    "SEND_OPTIONS",
    "WORK_OPTIONS",
    "EditOptions",
    "FetchOptions",
    "GroupConcurrency",
    "GroupLimits",
    "JobRecord",
    "QueueOptions",
    "ScheduledSendOptions",
    "SendOptions",
    "WorkArguments",
    "check_batch_size",
    "check_count",
    "check_flag",
    "check_int",
    "check_json",
    "check_key",
    "check_number",
    "check_seconds",
    "check_text",
    "fetch_options",
    "group_limits",
    "ids_and_fences",
    "ignored_groups",
    "job_id",
    "job_record",
    "known_only",
    "lifetime_fields",
    "normalize_output",
    "page_keyset",
    "payloads_json",
    "policy",
    "priority_bounds",
    "queue_name",
    "queue_options",
    "queue_options_json",
    "records_json",
    "retry_fields",
    "storable_text",
    "text_problem",
]
