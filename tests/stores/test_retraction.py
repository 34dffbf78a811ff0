"""A preference taken back, through the consolidator's own write path, on a real Postgres."""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from agents.consolidator.apply.candidate import apply_candidate
from agents.consolidator.apply.context import BatchContext
from agents.rules.candidates import candidates_for_turn
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryStatus, MemoryType
from services.stores.postgres import MemoryReader, MemoryWriter, PgPool
from tests.factories import T0, turn_event

DAY = timedelta(days=1)


def said(i: int, text: str, days: int, axis: int = 0) -> EmbeddedCandidate:
    """The user's turn `i`, `days` after the first, as its preference candidate, embedded near every other
    candidate on the same `axis`."""
    turn = turn_event(2 * i, text, step=timedelta(0), start=T0 + days * DAY)
    [preference] = [c for c in candidates_for_turn(turn) if c.type is MemoryType.PREFERENCE]
    v = np.zeros(384)
    v[axis], v[10 + i] = 1.0, 0.2  # cosine ~0.96 between two on one axis: each would merge into the other
    return EmbeddedCandidate(
        tenant_id="t", user_id="u", candidate=preference, vector=list(v / np.linalg.norm(v)), model="m"
    )


async def consolidate(pool: PgPool, item: EmbeddedCandidate) -> list[MemoryChange]:
    writer = MemoryWriter()
    async with pool.transaction("t") as conn:
        ctx = await BatchContext.load(writer, conn, [item], 0.92, 0.3)
        _, changes = await apply_candidate(writer, conn, item, item.candidate.observed_at, ctx)
    return changes


async def test_a_retraction_supersedes_what_it_takes_back_and_nothing_else(pool: PgPool) -> None:
    vegetarian = await consolidate(pool, said(0, "I'm vegetarian.", 0))
    jazz = await consolidate(pool, said(1, "I love jazz.", 1, axis=1))
    retraction = said(2, "I'm no longer vegetarian, I eat fish now.", 5)
    assert retraction.candidate.value == "vegetarian"
    changes = await consolidate(pool, retraction)
    [(old_id, op, reason)] = [(c.record.id, c.op, c.reason) for c in changes if c.op is not ChangeOp.ADDED]
    assert (old_id, op) == (vegetarian[0].record.id, ChangeOp.SUPERSEDED)
    assert reason == "taken back: User preference: I'm no longer vegetarian, I eat fish now."
    [added] = [c.record for c in changes if c.op is ChangeOp.ADDED]  # not merged into the diet it reads like
    reader = MemoryReader(pool)
    rows = {r.id: r for r in await reader.list_memories("t", "u", type_=None, status=None, limit=50, offset=0)}
    assert rows[old_id].status is MemoryStatus.SUPERSEDED
    assert rows[old_id].superseded_by == added.id
    assert rows[old_id].superseded_at == retraction.candidate.observed_at
    assert rows[jazz[0].record.id].status is MemoryStatus.ACTIVE  # says nothing of vegetarian

    # A replay takes nothing back twice; a preference said after the retraction stands.
    replay = await consolidate(pool, retraction)
    assert [c.op for c in replay if c.op is ChangeOp.SUPERSEDED and c.record.id != old_id] == []
    again = await consolidate(pool, said(3, "I'm vegan.", 9))
    late = await consolidate(pool, said(4, "I used to be vegan.", 7))  # imported late: said before "I'm vegan"
    assert [c.op for c in late] == [ChangeOp.ADDED]
    rows = {r.id: r for r in await reader.list_memories("t", "u", type_=None, status=None, limit=50, offset=0)}
    assert rows[again[0].record.id].status is MemoryStatus.ACTIVE
