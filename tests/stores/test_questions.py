"""Open questions in Postgres: found open, tentatively resolved by a later statement in the consolidator's batch."""

from __future__ import annotations

from datetime import timedelta

from agents.consolidator.questions import resolve_questions
from agents.questions import question_candidates
from agents.rules.candidates import candidates_for_turn
from schemas import ChangeOp, EmbeddedCandidate, EvictedChunk, MemoryType
from schemas.memory import QuestionState
from services.stores.postgres import MemoryWriter, PgPool
from tests.factories import turn_event
from tests.store_reads import open_questions
from tests.unit.test_questions import question_record


async def test_a_later_statement_resolves_an_open_question_once(pool: PgPool) -> None:
    writer = MemoryWriter()
    question = question_record()
    async with pool.transaction("t") as conn:
        await writer.upsert(conn, question, [1.0, 0.0, 0.0])
    assert [q.id for q in await open_questions(pool, "t", "u", limit=5)] == [question.id]

    said = turn_event(4, "Turns out the Japan conference visa is a short business visa.")
    said = said.model_copy(update={"ts": question.observed_at + timedelta(days=2)})
    exchange = next(c for c in candidates_for_turn(said) if c.type is MemoryType.EXCHANGE)
    batch = [EmbeddedCandidate(tenant_id="t", user_id="u", candidate=exchange, vector=[0.0, 1.0, 0.0], model="m")]
    async with pool.transaction("t") as conn:
        (change,) = await resolve_questions(writer, conn, batch, said.ts)
    assert change.op is ChangeOp.UPDATED
    assert change.vector == [1.0, 0.0, 0.0]  # the question stays indexed
    assert change.record.question is not None
    assert change.record.question.state is QuestionState.TENTATIVELY_RESOLVED
    assert await open_questions(pool, "t", "u", limit=5) == []
    async with pool.transaction("t") as conn:
        assert await resolve_questions(writer, conn, batch, said.ts) == []


def test_question_candidates_come_from_a_session_end_chunk() -> None:
    turns = [turn_event(0, "Which visa do I need for the Japan conference trip?")]
    chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="session_end", turns=turns, cause=["c"])
    assert [c.type for c in question_candidates(chunk)] == [MemoryType.QUESTION]
