"""The rolling per-session summary that LLM fact extraction reads and extends (LLM path a).

Each chunk evicted from a session's window is sent to the model with the
summary so far; the answer's updated summary replaces the stored one. Kafka
delivers at least once, so a chunk can come again, and folding it in twice
would repeat it in every later prompt. The row therefore keeps the chunk
folded last (`chunk_id`, and its newest turn as `through_turn_index`) and
the summary as it was before that chunk (`previous_summary`). The rule:

- the chunk folded last comes again (a crash before the offset commit): it
  is folded again from `previous_summary` and its answer replaces the
  summary, so the chunk only ever replaces its own contribution;
- an older chunk comes again (its newest turn index is not above
  `through_turn_index`: a replayed run of chunks): the summary already holds
  it, so it is sent with the current summary and the summary is not updated;
- anything else is a new chunk: folded into the current summary.

`save` enforces the same rule in SQL, so a stale writer never moves the mark
back. A turn delivered so late that the window evicts it after newer ones
counts as older and stays out of the summary (its facts are still
extracted): the cost of a rule that needs no list of every chunk folded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas import TurnEvent
from services.core.textutil import stable_id
from services.stores.postgres.pool import PgPool


@dataclass(frozen=True)
class ChunkMark:
    """Which chunk a summary was folded from, and how far into the session it reaches."""

    chunk_id: str
    through_turn_index: int
    through_event_id: str

    @classmethod
    def of(cls, turns: Sequence[TurnEvent]) -> ChunkMark:
        """The chunk's identity is its event ids; its reach is its newest turn, in the window's order."""
        newest = max(turns, key=lambda t: (t.turn_index, t.ts))
        return cls(stable_id("chunk", *(t.event_id for t in turns)), newest.turn_index, newest.event_id)


@dataclass(frozen=True)
class Basis:
    """What to send with a chunk, and whether the answer's summary may replace the stored one."""

    summary: str
    store: bool


@dataclass(frozen=True)
class SessionSummary:
    summary: str
    previous_summary: str
    mark: ChunkMark
    updated_at: datetime

    def basis(self, mark: ChunkMark) -> Basis:
        """The module docstring's rule, for a chunk of this session."""
        if mark.chunk_id == self.mark.chunk_id:
            return Basis(self.previous_summary, store=True)
        if mark.through_turn_index <= self.mark.through_turn_index:
            return Basis(self.summary, store=False)
        return Basis(self.summary, store=True)


def basis_for(stored: SessionSummary | None, mark: ChunkMark) -> Basis:
    """A session's first chunk starts from nothing."""
    return Basis("", store=True) if stored is None else stored.basis(mark)


def _summary(row: dict[str, Any]) -> SessionSummary:
    mark = ChunkMark(str(row["chunk_id"]), int(row["through_turn_index"]), str(row["through_event_id"]))
    return SessionSummary(str(row["summary"]), str(row["previous_summary"]), mark, row["updated_at"])


class SummaryStore:
    """One row per session; every query is scoped by tenant and user as well as the session."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def load(self, tenant_id: str, user_id: str, session_id: str) -> SessionSummary | None:
        async with self._pool.connection("session_summary_load") as conn:
            cur = await conn.execute(
                """SELECT summary, previous_summary, chunk_id, through_turn_index, through_event_id, updated_at
                   FROM session_summaries WHERE tenant_id = %s AND user_id = %s AND session_id = %s""",
                (tenant_id, user_id, session_id),
            )
            row = await cur.fetchone()
        return None if row is None else _summary(row)

    async def save(self, tenant_id: str, user_id: str, session_id: str, summary: str, mark: ChunkMark) -> bool:
        """Store `summary` as folded from the chunk `mark`; False when the rule says the chunk is older."""
        async with self._pool.connection("session_summary_save") as conn:
            cur = await conn.execute(
                """INSERT INTO session_summaries AS s (tenant_id, user_id, session_id, summary, previous_summary,
                                                       chunk_id, through_turn_index, through_event_id)
                   VALUES (%(t)s, %(u)s, %(s)s, %(summary)s, '', %(chunk)s, %(through)s, %(event)s)
                   ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE SET
                     previous_summary = CASE WHEN s.chunk_id = EXCLUDED.chunk_id
                                             THEN s.previous_summary ELSE s.summary END,
                     summary = EXCLUDED.summary, chunk_id = EXCLUDED.chunk_id,
                     through_turn_index = EXCLUDED.through_turn_index,
                     through_event_id = EXCLUDED.through_event_id, updated_at = now()
                   WHERE s.chunk_id = EXCLUDED.chunk_id OR s.through_turn_index < EXCLUDED.through_turn_index
                   RETURNING 1 AS saved""",
                {
                    "t": tenant_id,
                    "u": user_id,
                    "s": session_id,
                    "summary": summary,
                    "chunk": mark.chunk_id,
                    "through": mark.through_turn_index,
                    "event": mark.through_event_id,
                },
            )
            return await cur.fetchone() is not None
