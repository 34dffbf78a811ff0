"""The `memory.changes` message of each record a decision writes, and the op a retired record goes out as."""

from __future__ import annotations

from datetime import datetime

from agents.consolidator.apply.records import context_vector
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryRecord, MemoryStatus


def change(
    record: MemoryRecord,
    op: ChangeOp,
    item: EmbeddedCandidate,
    now: datetime,
    *,
    vector: list[float] | None = None,
    reason: str | None = None,
) -> MemoryChange:
    """`vector` defaults to the candidate's: right whenever the record's text is the candidate's."""
    active = record.status is MemoryStatus.ACTIVE
    return MemoryChange(
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        op=op,
        record=record,
        vector=(item.vector if vector is None else vector) if active else None,
        context_vector=context_vector(record, item) if active else None,
        cause=item.candidate.source.event_ids,
        committed_at=now,
        turn_ts=item.candidate.observed_at,
        reason=reason,
    )


_RETIRED_OPS = {
    MemoryStatus.MERGED: ChangeOp.MERGED,
    MemoryStatus.DELETED: ChangeOp.DELETED,
    MemoryStatus.PRUNED: ChangeOp.DELETED,
}


def retired_op(record: MemoryRecord) -> ChangeOp:
    return _RETIRED_OPS.get(record.status, ChangeOp.SUPERSEDED)
