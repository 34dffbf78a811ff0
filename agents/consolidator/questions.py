"""Open questions meet later statements inside the consolidator's batch transaction."""

from __future__ import annotations

from datetime import datetime

from agents.questions import answers
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryType
from schemas.memory import QuestionState
from services.stores.postgres import Conn, MemoryWriter
from services.stores.postgres.maintenance import unanswered_questions


async def resolve_questions(
    writer: MemoryWriter, conn: Conn, batch: list[EmbeddedCandidate], now: datetime
) -> list[MemoryChange]:
    """A user statement that shares enough of an open (or deferred) question's terms moves it to `tentatively_resolved`."""
    statements = [item.candidate for item in batch if item.candidate.type is MemoryType.EXCHANGE]
    scopes = sorted({(c.tenant_id, c.user_id) for c in statements})
    changes: list[MemoryChange] = []
    for question, vector in await unanswered_questions(conn, scopes):
        answer = next(
            (
                c
                for c in statements
                if (c.tenant_id, c.user_id) == (question.tenant_id, question.user_id) and answers(question, c)
            ),
            None,
        )
        if answer is None or question.question is None:
            continue
        state = question.question.model_copy(
            update={"state": QuestionState.TENTATIVELY_RESOLVED, "attempts": question.question.attempts + 1}
        )
        updated = question.model_copy(update={"question": state, "version": question.version + 1, "updated_at": now})
        await writer.upsert(conn, updated, None)
        changes.append(
            MemoryChange(
                tenant_id=updated.tenant_id,
                user_id=updated.user_id,
                op=ChangeOp.UPDATED,
                record=updated,
                vector=vector,
                cause=answer.source.event_ids,
                committed_at=now,
                reason=f"tentatively answered by event {answer.source.event_ids[0]}",
            )
        )
    return changes
