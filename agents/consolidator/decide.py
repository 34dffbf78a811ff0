"""What the consolidator does with one candidate, given what memory holds.

Pure: the caller looks up the neighbours that matter (same id, same content,
same keyed fact, the most similar active memory of the type) and whether the
candidate is important enough to keep, and applies the decision in its
transaction. Order: exact duplicate, keyed fact, merge, importance, add.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agents.consolidator.merge import candidate_wins, mergeable
from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType
from services.textutil import normalize, stable_id


class Action(StrEnum):
    ADD = "added"
    REINFORCE = "reinforced"
    SUPERSEDE = "superseded"
    # The candidate's source events are already in the record: a redelivery
    # or replay. Nothing changes; the current state is re-published.
    REPLAYED = "replayed"
    # Near-duplicate of an active memory: one survives, the other is `merged` into it.
    MERGED = "merged"
    # Below the importance threshold: not stored as a memory of its own.
    SKIPPED = "skipped"
    # LLM path only: NONE (adds nothing) and DELETE (the target is no longer true; nothing replaces it).
    IGNORED = "ignored"
    DELETED = "deleted"


@dataclass(frozen=True)
class Neighbours:
    same_id: MemoryRecord | None = None
    same_content: MemoryRecord | None = None
    active_fact: MemoryRecord | None = None
    # The most similar active memory of the candidate's type, if any.
    similar: MemoryRecord | None = None
    similarity: float = 0.0


@dataclass(frozen=True)
class Decision:
    action: Action
    record_id: str
    target: MemoryRecord | None = None
    # Merges only: the candidate's text replaces the target's (the target becomes the loser).
    candidate_wins: bool = False
    similarity: float | None = None
    # Why, when the LLM decided: carried as the change's reason.
    reason: str | None = None


def _already_seen(candidate: MemoryCandidate, record: MemoryRecord) -> bool:
    return set(candidate.source.event_ids) <= set(record.source.event_ids)


def _touch(candidate: MemoryCandidate, record: MemoryRecord) -> Decision:
    action = Action.REPLAYED if _already_seen(candidate, record) else Action.REINFORCE
    return Decision(action, record.id, record)


def decide(
    candidate: MemoryCandidate, found: Neighbours, *, merge_similarity: float | None = None, keep: bool = True
) -> Decision:
    """`merge_similarity` None never merges; `keep` is the importance verdict (see importance.kept)."""
    same_id = found.same_id
    if same_id is not None and same_id.status is MemoryStatus.ACTIVE:
        return _touch(candidate, same_id)
    if same_id is not None and _already_seen(candidate, same_id):
        return Decision(Action.REPLAYED, same_id.id, same_id)
    if found.same_content is not None:
        return _touch(candidate, found.same_content)
    # A value stated again after it was superseded is a new version, not a revival.
    record_id = (
        candidate.candidate_id if same_id is None else stable_id(candidate.candidate_id, *candidate.source.event_ids)
    )
    old = found.active_fact
    if (
        candidate.type is MemoryType.FACT
        and old is not None
        and normalize(old.value or "") != normalize(candidate.value or "")
    ):
        return Decision(Action.SUPERSEDE, record_id, old)
    near = found.similar
    if near is not None and merge_similarity is not None and found.similarity >= merge_similarity:
        if candidate.source.event_ids and _already_seen(candidate, near):
            # Merged before (its events are in the survivor's provenance): never twice.
            return Decision(Action.REPLAYED, near.id, near)
        if not mergeable(candidate, near):
            return Decision(Action.ADD, record_id) if keep else Decision(Action.SKIPPED, record_id)
        wins = candidate_wins(candidate.text, near.text)
        return Decision(Action.MERGED, record_id, near, candidate_wins=wins, similarity=found.similarity)
    if not keep:
        return Decision(Action.SKIPPED, record_id)
    return Decision(Action.ADD, record_id)
