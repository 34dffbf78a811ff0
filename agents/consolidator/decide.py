"""What the consolidator does with one candidate, given what memory holds.

Pure: the caller looks up the neighbours that matter (same id, same content,
same keyed fact, the most similar active memory of the type) and whether the
candidate is important enough to keep, and applies the decision in its
transaction. Order: exact duplicate, keyed fact, merge, importance, add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from agents.consolidator.merge import candidate_wins, mergeable
from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType
from services.core.textutil import normalize, stable_id


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
    # Observed before the version that is current now: stored as a past version, never the current one.
    HISTORY = "history"


@dataclass(frozen=True)
class Neighbours:
    same_id: MemoryRecord | None = None
    same_content: MemoryRecord | None = None
    active_fact: MemoryRecord | None = None
    # The keyed fact's versions in the timeline (active and superseded rows of its key), any order.
    versions: tuple[MemoryRecord, ...] = ()
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
    # HISTORY: when the stored version stops being true, and which version follows it.
    ends_at: datetime | None = None
    ends_by: str | None = None
    # The version before the candidate's time whose validity now ends at the candidate's observation.
    cut: MemoryRecord | None = None
    # HISTORY inside the cut version's time, which was stated again at `split_at`: from then on the cut
    # version's value holds again, as a version of its own (the statement between the two now ends there).
    split_at: datetime | None = None


# A provenance metadata entry of a keyed fact's version: one more time its value was stated (`at`, ISO).
RESTATED = "restated"


def restatements(record: MemoryRecord) -> list[datetime]:
    """When the version's value was stated again after its first observation, in time order."""
    return sorted(datetime.fromisoformat(str(e["at"])) for e in record.source.metadata if e.get("source") == RESTATED)


def _already_seen(candidate: MemoryCandidate, record: MemoryRecord) -> bool:
    return set(candidate.source.event_ids) <= set(record.source.event_ids)


def _touch(candidate: MemoryCandidate, record: MemoryRecord) -> Decision:
    action = Action.REPLAYED if _already_seen(candidate, record) else Action.REINFORCE
    return Decision(action, record.id, record)


def _keyed(candidate: MemoryCandidate) -> bool:
    return candidate.type is MemoryType.FACT and bool(candidate.category) and bool(candidate.key_name)


def _same_value(a: MemoryCandidate | MemoryRecord, b: MemoryRecord) -> bool:
    return normalize(a.value or "") == normalize(b.value or "")


def _when(version: MemoryRecord) -> tuple[datetime, bool, datetime]:
    """A version's place in time: by observation, then (a tie) by when it ended, the current one last."""
    ended = version.superseded_at if version.status is not MemoryStatus.ACTIVE else None
    return (version.observed_at, ended is None, ended or version.observed_at)


def _covers(version: MemoryRecord, at: datetime) -> bool:
    """Whether the version was the key's value at `at` (it started at or before it)."""
    if version.status is MemoryStatus.ACTIVE:
        return True
    return version.superseded_at is not None and version.superseded_at > at


def in_time(candidate: MemoryCandidate, versions: Sequence[MemoryRecord], record_id: str) -> Decision | None:
    """Where a keyed fact's statement goes among the key's versions, by observation time.

    P is the latest version observed at or before the candidate, S the first
    after it. The same value as P (P still true then) reinforces P; the same
    value as S reinforces S from the candidate's earlier time (P now ends
    there). A P stated again after the candidate (a restatement folded into
    it, `restatements`) is split: P ends at the candidate, the candidate at
    that restatement, from which P's value holds again. Otherwise the candidate is a version of its own: the current one
    when nothing follows it (SUPERSEDE of the active P, or None: no version
    holds then and the caller adds it), else history, true until P's old end
    (or S's observation), with P cut at the candidate's time. Nothing is ever
    superseded before it was observed. Statements of the same instant keep
    the order they arrived in (the later one follows), as before.
    """
    at = candidate.observed_at
    ordered = sorted(versions, key=_when)
    before = [v for v in ordered if v.observed_at <= at]
    after = [v for v in ordered if v.observed_at > at]
    p = before[-1] if before and _covers(before[-1], at) else None
    s = after[0] if after else None
    if p is not None and _same_value(candidate, p):
        return Decision(Action.REINFORCE, p.id, p)
    again = None if p is None else next((r for r in restatements(p) if r > at and _covers(p, r)), None)
    if p is not None and again is not None:
        # P was stated again after the candidate: P's value holds again from then on.
        return Decision(Action.HISTORY, record_id, p, cut=p, split_at=again)
    if p is not None and p.status is MemoryStatus.ACTIVE:
        return Decision(Action.SUPERSEDE, record_id, p)
    if p is not None and p.superseded_at is not None:
        ends_at, ends_by = p.superseded_at, p.superseded_by
    elif s is not None:
        ends_at, ends_by = s.observed_at, s.id
    else:
        return None
    if s is not None and ends_by == s.id and _same_value(candidate, s):
        return Decision(Action.REINFORCE, s.id, s, cut=p)
    return Decision(Action.HISTORY, record_id, s, ends_at=ends_at, ends_by=ends_by, cut=p)


def decide(
    candidate: MemoryCandidate, found: Neighbours, *, merge_similarity: float | None = None, keep: bool = True
) -> Decision:
    """`merge_similarity` None never merges; `keep` is the importance verdict (see importance.kept)."""
    same_id = found.same_id
    versions = found.versions or (() if found.active_fact is None else (found.active_fact,))
    if _keyed(candidate) and versions:
        held = [v for v in (same_id, *versions) if v is not None]
        seen = next((v for v in held if _already_seen(candidate, v)), None)
        if seen is not None:
            return Decision(Action.REPLAYED, seen.id, seen)
        # A value stated again after it was superseded is a new version, not a revival.
        taken = same_id is not None or any(v.id == candidate.candidate_id for v in versions)
        new_id = stable_id(candidate.candidate_id, *candidate.source.event_ids) if taken else candidate.candidate_id
        placed = in_time(candidate, versions, new_id)
        if placed is not None:
            return placed
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
    near = found.similar
    if near is not None and merge_similarity is not None and found.similarity >= merge_similarity:
        if candidate.source.event_ids and _already_seen(candidate, near):
            # Merged before (its events are in the survivor's provenance): never twice.
            return Decision(Action.REPLAYED, near.id, near)
        if not mergeable(candidate, near):
            return Decision(Action.ADD, record_id) if keep else Decision(Action.SKIPPED, record_id)
        wins = candidate_wins(candidate.text, near.text, earlier=candidate.observed_at < near.observed_at)
        return Decision(Action.MERGED, record_id, near, candidate_wins=wins, similarity=found.similarity)
    if not keep:
        return Decision(Action.SKIPPED, record_id)
    return Decision(Action.ADD, record_id)
