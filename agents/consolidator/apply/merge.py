"""Writing a merge: the loser leaves the active indexes, the winner (records.merge_records) takes its place.

Which record is merged into which is decided before (agents.consolidator.merge,
decide); this writes both rows and their changes.
"""

from __future__ import annotations

from datetime import datetime

from agents.consolidator.apply.changes import change
from agents.consolidator.apply.context import BatchContext
from agents.consolidator.apply.records import context_vector, merge_records
from agents.consolidator.decide import Decision
from agents.consolidator.merge import Similar
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange
from services.stores.postgres import Conn, MemoryWriter


async def merge(
    pg: MemoryWriter,
    conn: Conn,
    item: EmbeddedCandidate,
    decision: Decision,
    near: Similar,
    ctx: BatchContext,
    now: datetime,
) -> list[MemoryChange]:
    winner, loser = merge_records(item, decision, now)
    reason = f"similarity {decision.similarity:.3f}"
    winner_vector = item.vector if decision.candidate_wins else near.vector
    # The loser leaves the active indexes (a keyed fact's unique one too) before the winner is written.
    if decision.candidate_wins:
        await pg.upsert(conn, loser, None)
        await pg.upsert(conn, winner, item.vector, context_vector(winner, item))
    else:
        await pg.upsert(conn, loser, item.vector, context_vector(loser, item))
        await pg.upsert(conn, winner, None)
    ctx.view.wrote(loser, None)
    ctx.view.wrote(winner, winner_vector)
    if decision.candidate_wins:
        ctx.added(item, winner)
    return [
        change(loser, ChangeOp.MERGED, item, now, reason=reason),
        change(
            winner,
            ChangeOp.ADDED if decision.candidate_wins else ChangeOp.UPDATED,
            item,
            now,
            vector=winner_vector,
            reason=reason,
        ),
    ]
