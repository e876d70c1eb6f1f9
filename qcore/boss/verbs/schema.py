"""The schema's verbs of ``Boss``: drift and the async migrations."""

from __future__ import annotations

import uuid
from typing import Any

from qcore.arguments import verb
from qcore.boss.services import busy
from qcore.boss.verbs.parts import BossParts
from qcore.verbs import bam as bam_ops
from qcore.verbs.bam import BamEntry, BamStatus
from qcore.verbs.drift import DriftReport, detect_schema_drift

__all__ = ["SchemaVerbs"]


class SchemaVerbs:
    """The schema's health and its async migrations (a part of ``Boss``)."""

    @verb()
    async def detect_schema_drift(self: BossParts, *, db: Any = None) -> DriftReport:
        """Compare the schema with what a v46 install of this backend makes; it changes nothing.

        The comparison covers tables, indexes, functions, columns, constraints and the
        state enum, from the catalog alone. The result is a
        :class:`~qcore.verbs.drift.DriftReport` whose entries each carry the statement
        that repairs them. Only reports.
        """
        return await detect_schema_drift(self.context(db))

    @verb()
    async def get_bam_status(self: BossParts, *, db: Any = None) -> list[BamStatus]:
        """How many async migration commands are in each status, and when the newest was queued.

        The statuses: ``pending``, ``in_progress``, ``completed``, ``failed``.
        """
        return await bam_ops.get_bam_status(self.context(db))

    @verb()
    async def get_bam_entries(
        self: BossParts, *, limit: int = 1000, after: uuid.UUID | str | None = None, db: Any = None
    ) -> list[BamEntry]:
        """The async migration commands, oldest version first.

        At most ``limit`` (1 to 100,000); ``after``, the last id of the previous page,
        reads the next one (``ValidationError`` when that entry has been deleted since).
        """
        return await bam_ops.get_bam_entries(self.context(db), limit=limit, after=after)

    def is_bam_working(self: BossParts) -> bool:
        """Whether this instance is processing an async migration command right now."""
        return busy(self._running, "bam")
