"""Writing a statement in time: a past version (history), and the cut of the version a later statement ends."""

from __future__ import annotations

from datetime import datetime

from agents.consolidator.apply.changes import change, retired_op
from agents.consolidator.apply.context import BatchContext
from agents.consolidator.apply.records import context_vector, new_record, resumed
from agents.consolidator.decide import Decision
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryStatus
from services.stores.postgres import Conn, MemoryWriter


async def cut(
    pg: MemoryWriter,
    conn: Conn,
    item: EmbeddedCandidate,
    decision: Decision,
    now: datetime,
    ctx: BatchContext | None,
    *,
    status: MemoryStatus | None = None,
) -> list[MemoryChange]:
    """The version before the candidate's time now ends at its observation, followed by the decision's record."""
    if decision.cut is None:
        return []
    cut = decision.cut.model_copy(
        update={
            "status": status or decision.cut.status,
            "superseded_at": item.candidate.observed_at,
            "superseded_by": decision.record_id,
            "updated_at": now,
            "version": decision.cut.version + 1,
        }
    )
    await pg.upsert(conn, cut, None)
    if ctx is not None:
        ctx.view.wrote(cut, None)
    return [change(cut, retired_op(cut), item, now, reason=decision.reason)]


async def history(
    pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, decision: Decision, now: datetime, ctx: BatchContext | None
) -> list[MemoryChange]:
    """A statement observed before the current version: a superseded version, true from its observation until
    `ends_at` (or, inside a version stated again later, until that restatement, from which the version's value
    holds again as a version of its own), with its vector (a point-in-time read matches it). The current version
    is not touched, unless it is the one split."""
    changes: list[MemoryChange] = []
    ends_at, ends_by = decision.ends_at, decision.ends_by
    if decision.split_at is not None and decision.cut is not None:
        held = await pg.with_vector(conn, item.tenant_id, item.user_id, decision.cut.id)
        part = resumed(decision.cut, decision.split_at, now)
        ends_at, ends_by = part.observed_at, part.id
        # The cut version leaves the active-fact index before its resumed part may enter it.
        changes += await cut(pg, conn, item, decision, now, ctx, status=MemoryStatus.SUPERSEDED)
        vector = None if held is None else held[1]
        await pg.upsert(conn, part, vector)
        if ctx is not None:
            ctx.view.wrote(part, vector)
        op = ChangeOp.ADDED if part.status is MemoryStatus.ACTIVE else retired_op(part)
        changes.append(change(part, op, item, now, vector=vector, reason=decision.reason))
    record = new_record(item, decision.record_id, now).model_copy(
        update={"status": MemoryStatus.SUPERSEDED, "superseded_at": ends_at, "superseded_by": ends_by}
    )
    await pg.upsert(conn, record, item.vector, context_vector(record, item))
    if ctx is not None:
        ctx.view.wrote(record, None)
    changes.append(change(record, ChangeOp.SUPERSEDED, item, now, reason=decision.reason))
    if decision.split_at is None:
        changes += await cut(pg, conn, item, decision, now, ctx)
    return changes
