"""When an open question counts as touched (pure): the rule the questions stage and recall share.

The stage (agents.questions) stores a question's related terms and resolves
it when a later statement shares enough of them; recall surfaces an open one
when the query, or what recall returned, touches those terms. Both count
shared terms the same way, so they live here, below both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from schemas import MemoryRecord
from schemas.memory import QuestionState
from services.core.terms import related_terms

# Terms a later text must share with a question to be about it.
MIN_SHARED_TERMS = 2


def shared_terms(question: MemoryRecord, words: Iterable[str]) -> set[str]:
    """The question's related terms among `words` (compared lower-cased)."""
    related = set(question.question.related if question.question else [])
    return related & {w.lower() for w in words}


def touches(question: MemoryRecord, query: str, recalled: Iterable[Sequence[str]]) -> bool:
    """Whether a recall's query, or the entities of what it returned, touch an open question's terms.

    Only an `open` question is surfaced: a deferred one was surfaced enough.
    """
    if question.question is None or question.question.state is not QuestionState.OPEN:
        return False
    if len(shared_terms(question, related_terms(query))) >= MIN_SHARED_TERMS:
        return True
    return any(shared_terms(question, ents) for ents in recalled)
