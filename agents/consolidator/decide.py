"""What the consolidator does with one candidate, given what memory holds.

Pure: the caller looks up the three neighbours that matter (same id, same
content, same keyed fact) and applies the decision in its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType
from services.textutil import normalize, stable_id


class Action(StrEnum):
    ADD = "added"
    REINFORCE = "reinforced"
    SUPERSEDE = "superseded"
    # The candidate's source events are already in the record: a redelivery
    # or replay. Nothing changes; the current state is re-published.
    REPLAYED = "replayed"


@dataclass(frozen=True)
class Neighbours:
    same_id: MemoryRecord | None = None
    same_content: MemoryRecord | None = None
    active_fact: MemoryRecord | None = None


@dataclass(frozen=True)
class Decision:
    action: Action
    record_id: str
    target: MemoryRecord | None = None


def _already_seen(candidate: MemoryCandidate, record: MemoryRecord) -> bool:
    return set(candidate.source.event_ids) <= set(record.source.event_ids)


def _touch(candidate: MemoryCandidate, record: MemoryRecord) -> Decision:
    action = Action.REPLAYED if _already_seen(candidate, record) else Action.REINFORCE
    return Decision(action, record.id, record)


def decide(candidate: MemoryCandidate, found: Neighbours) -> Decision:
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
    return Decision(Action.ADD, record_id)
