"""Open questions: what the user asked and the conversation left unresolved (pure functions).

Found at eviction: a user question whose reply admits not knowing, or, at
session end, one that got no reply at all. (A question in a trimmed chunk
without a reply may still be answered by the turns the window kept.) A
later user statement that shares enough of the question's terms is taken
as a tentative answer: memstream cannot know it is right, so it says
"tentatively". Maintenance defers a question recall has surfaced often or
that has stayed open long (agents.maintenance.logic.defer): recall stops
surfacing it, but a later answer still resolves it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agents.rules.extract import entities, sentences
from schemas import EvictedChunk, MemoryCandidate, MemoryRecord, MemoryType, Provenance, Role, TurnEvent
from schemas.memory import Question, QuestionState
from services.textutil import content_words, stable_id

EXTRACTOR = "questions/v1"
_UNSURE = re.compile(
    r"\b(i (?:don'?t|do not) know|not sure|no idea|i can'?t (?:say|tell)|i cannot (?:say|tell)|unable to"
    r"|(?:i'?ll|let me) (?:check|find out|get back)|unclear|hard to say)\b",
    re.IGNORECASE,
)
MIN_SHARED_TERMS = 2


def related_terms(text: str) -> list[str]:
    """Content words and entities, lower-cased: what a later answer or query must touch."""
    return sorted({*content_words(text), *(e.lower() for e in entities(text))})[:16]


def unresolved(turns: Sequence[TurnEvent], *, session_ended: bool) -> list[tuple[TurnEvent, str]]:
    found: list[tuple[TurnEvent, str]] = []
    for i, turn in enumerate(turns):
        if turn.role is not Role.USER:
            continue
        asked = [s for s in sentences(turn.content) if s.endswith("?") and len(content_words(s)) >= 2]
        if not asked:
            continue
        reply = next((t for t in turns[i + 1 :] if t.role is Role.ASSISTANT), None)
        if (reply is None and session_ended) or (reply is not None and _UNSURE.search(reply.content)):
            found.extend((turn, question) for question in asked)
    return found


def question_candidates(chunk: EvictedChunk) -> list[MemoryCandidate]:
    return [
        MemoryCandidate(
            candidate_id=stable_id(chunk.tenant_id, chunk.user_id, MemoryType.QUESTION.value, turn.event_id, text),
            tenant_id=chunk.tenant_id,
            user_id=chunk.user_id,
            type=MemoryType.QUESTION,
            text=text,
            importance=0.5,
            confidence=0.6,
            observed_at=turn.ts,
            entities=entities(text),
            source=Provenance(session_id=chunk.session_id, event_ids=[turn.event_id], metadata=[turn.metadata]),
            extractor=EXTRACTOR,
            question=Question(related=related_terms(text)),
        )
        for turn, text in unresolved(chunk.turns, session_ended=chunk.reason == "session_end")
    ]


def shared_terms(question: MemoryRecord, words: Iterable[str]) -> set[str]:
    related = set(question.question.related if question.question else [])
    return related & {w.lower() for w in words}


AWAITING_ANSWER = frozenset({QuestionState.OPEN, QuestionState.DEFERRED})


def answers(question: MemoryRecord, statement: MemoryCandidate) -> bool:
    """Whether a later user statement (not itself a question) plausibly answers an open or deferred `question`."""
    if question.question is None or question.question.state not in AWAITING_ANSWER:
        return False
    if statement.observed_at <= question.observed_at or statement.text.rstrip().endswith("?"):
        return False
    return len(shared_terms(question, related_terms(statement.text))) >= MIN_SHARED_TERMS


def touches(question: MemoryRecord, query: str, recalled: Iterable[Sequence[str]]) -> bool:
    """Whether a recall's query, or the entities of what it returned, touch an open question's terms.

    Only an `open` question is surfaced: a deferred one was surfaced enough.
    """
    if question.question is None or question.question.state is not QuestionState.OPEN:
        return False
    if len(shared_terms(question, related_terms(query))) >= MIN_SHARED_TERMS:
        return True
    return any(shared_terms(question, ents) for ents in recalled)
