"""Replaying a candidate already applied: its current state published again, nothing written."""

from __future__ import annotations

from datetime import datetime

from agents.consolidator.apply.changes import change, retired_op
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryRecord, MemoryStatus
from services.core.textutil import content_hash
from services.stores.postgres import Conn, MemoryWriter


async def replayed(
    pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, target: MemoryRecord, now: datetime
) -> list[MemoryChange]:
    """Publish the current state again (the first publish may have been lost between commit and send).

    With what the target superseded or absorbed; a candidate that lost a merge
    re-publishes itself (`merged`) and its winner, with the winner's own vector.
    """
    if target.status is MemoryStatus.MERGED and target.superseded_by is not None:
        changes = [change(target, ChangeOp.MERGED, item, now)]
        found = await pg.with_vector(conn, target.tenant_id, target.user_id, target.superseded_by)
        if found is not None and found[0].status is MemoryStatus.ACTIVE and found[1] is not None:
            changes.append(change(found[0], ChangeOp.UPDATED, item, now, vector=found[1]))
        return changes
    vector = None
    if target.content_hash != content_hash(item.candidate.text):
        # A merge survivor with other words than this candidate: its own vector, not the candidate's.
        found = await pg.with_vector(conn, target.tenant_id, target.user_id, target.id)
        vector = None if found is None else found[1]
    op = ChangeOp.ADDED if target.version == 1 else ChangeOp.UPDATED
    if target.status is not MemoryStatus.ACTIVE:  # a past version (history)
        op = retired_op(target)
    changes = [change(target, op, item, now, vector=vector)]
    for old in await pg.superseded_by(conn, target.tenant_id, target.user_id, target.id):
        changes.append(change(old, retired_op(old), item, now))
    return changes
