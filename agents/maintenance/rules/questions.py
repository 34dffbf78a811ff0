"""Open questions: one surfaced too often, or open too long, without an answer is deferred (recall stops surfacing it)."""

from __future__ import annotations

from datetime import datetime

from agents.maintenance.rules.common import days
from agents.maintenance.rules.config import Rules
from schemas import MemoryRecord, MemoryStatus, MemoryType
from schemas.memory import QuestionState


def defer(record: MemoryRecord, now: datetime, rules: Rules) -> tuple[MemoryRecord, str] | None:
    """The question moved to `deferred` and why, or None when it stays as it is.

    Only an active question in state `open` is deferred: surfaced at least
    `question_max_surfaced` times (its access count), or asked more than
    `question_defer_after` before `now`. `attempts` becomes the surfacings.
    """
    question = record.question
    if record.type is not MemoryType.QUESTION or record.status is not MemoryStatus.ACTIVE:
        return None
    if question is None or question.state is not QuestionState.OPEN:
        return None
    surfaced = record.access_count
    age = now - record.observed_at
    if surfaced >= rules.question_max_surfaced:
        why = f"surfaced {surfaced} times without an answer (limit {rules.question_max_surfaced})"
    elif age > rules.question_defer_after:
        why = f"open for {age.days} days without an answer (limit {days(rules.question_defer_after)})"
    else:
        return None
    state = question.model_copy(update={"state": QuestionState.DEFERRED, "attempts": surfaced})
    return record.model_copy(update={"question": state, "updated_at": now}), f"deferred: {why}"
