"""Semantic dedup: which memories may merge, which text survives, and the batch's view of neighbours.

Pure (numpy only). The store answers "nearest active memory of the same
type" once per batch; `BatchView` folds in what the batch itself has written
since, so two phrasings in one batch merge too and a neighbour retired
earlier in the batch is never merged into.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.consolidator.importance import cosine
from agents.provenance import MAX_SOURCES
from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType, Provenance
from schemas.memory import RETRACTION
from services.core.textutil import LETTER, UPPER

# Exchanges and episodes are what was said and when: two similar turns are two
# events, not one memory. Question records track their own state.
MERGE_TYPES = frozenset({MemoryType.FACT, MemoryType.PREFERENCE, MemoryType.SEMANTIC, MemoryType.PATTERN})
MERGE_BOOST = 0.05

_WORD = re.compile(rf"{LETTER}(?:{LETTER}|['-]){{0,63}}|\d+(?:[.,:/]\d+)*")
_NUMBER = re.compile(r"\d")
# A capital of any script and the letters after it, not a sentence's first word: "Zürich", "Łódź".
_ENTITY = re.compile(rf"(?<![.!?:]\s)(?<!^)\b{UPPER}[^\W\d_A-Z]{{1,40}}")
_STOPWORDS = frozenset(
    """a an the and or but if so to of in on at by for with from as is are was were be been being am do does did
    have has had i me my mine we us our you your he she him her it its they them their this that these those
    there here very really just quite a lot lots much many some any all not no yes user preference also too
    about into than then can could would should will shall may might must""".split()
)


@dataclass(frozen=True)
class Specificity:
    """What a text pins down; compared field by field, most telling first."""

    entities: int
    numbers: int
    content_words: int
    length: int

    def key(self) -> tuple[int, int]:
        # Entities and numbers are what a vaguer phrasing loses, so they weigh double.
        return (2 * self.entities + 2 * self.numbers + self.content_words, self.length)


def specificity(text: str) -> Specificity:
    words = _WORD.findall(text)
    content = {w.lower() for w in words if w.lower() not in _STOPWORDS and not _NUMBER.search(w)}
    numbers = {w for w in words if _NUMBER.search(w)}
    entities = set(_ENTITY.findall(text)) - {"I", "User"}
    return Specificity(len(entities), len(numbers), len(content), len(text.strip()))


def candidate_wins(candidate_text: str, existing_text: str, *, earlier: bool = False) -> bool:
    """The more specific text survives: 2·entities + 2·numbers + distinct content words, then length.

    A tie keeps the wording said first (`earlier`: the candidate was observed
    before the existing memory), whichever arrived first: a memory's wording
    changes only when a later statement says strictly more, and a late
    arrival never wins for arriving last.
    """
    mine, theirs = specificity(candidate_text).key(), specificity(existing_text).key()
    return mine > theirs or (mine == theirs and earlier)


def mergeable(candidate: MemoryCandidate, record: MemoryRecord) -> bool:
    """Same scope and type, a mergeable type, and (for facts) no clash of keys."""
    if (candidate.tenant_id, candidate.user_id, candidate.type) != (record.tenant_id, record.user_id, record.type):
        return False
    if candidate.type not in MERGE_TYPES or record.status is not MemoryStatus.ACTIVE:
        return False
    if RETRACTION in (candidate.category, record.category):
        # "I'm no longer vegetarian" reads much like "I'm vegetarian": merged, one would swallow the other.
        return False
    if candidate.type is MemoryType.FACT:
        # Two keyed facts are one memory only under one key; keyed-fact supersession handles a new value.
        return (candidate.category, candidate.key_name) == (record.category, record.key_name)
    return True


def union_source(winner: Provenance, other: Provenance, *, metadata: list[dict[str, object]]) -> Provenance:
    """Both records' source events, the winner's first, newest MAX_SOURCES kept."""
    events = [*winner.event_ids, *(e for e in other.event_ids if e not in winner.event_ids)]
    return Provenance(session_id=winner.session_id, event_ids=events[-MAX_SOURCES:], metadata=metadata)


def merged_importance(a: float, b: float) -> float:
    return min(1.0, max(a, b) + MERGE_BOOST)


def union_entities(first: Sequence[str], second: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))


@dataclass(frozen=True)
class Similar:
    """An active memory close to a candidate, with its own vector (for the change event)."""

    record: MemoryRecord
    similarity: float
    vector: list[float] | None


@dataclass
class BatchView:
    """Records written earlier in this batch, over the batch query's (possibly stale) answers."""

    current: dict[str, MemoryRecord] = field(default_factory=dict)
    vectors: dict[str, list[float]] = field(default_factory=dict)

    def wrote(self, record: MemoryRecord, vector: Sequence[float] | None) -> None:
        self.current[record.id] = record
        if vector is not None:
            self.vectors[record.id] = list(vector)

    def best(
        self, candidate: MemoryCandidate, vector: Sequence[float], stored: Sequence[Similar], threshold: float
    ) -> Similar | None:
        """The most similar mergeable active memory at or above `threshold`; ties go to the smaller id.

        `stored` are the store's nearest rows as of the batch start; a row this
        batch has since changed is judged by its current state.
        """
        options = [s for s in stored if s.record.id not in self.current]
        stored_vectors = {s.record.id: s.vector for s in stored}
        for rid, record in self.current.items():
            # Scope first: a batch spans many users, and the cosine is the costly part.
            if not mergeable(candidate, record):
                continue
            own = self.vectors.get(rid) or stored_vectors.get(rid)
            if own is None or len(own) != len(vector):
                continue
            options.append(Similar(record, cosine(vector, own), own))
        eligible = [o for o in options if o.similarity >= threshold and mergeable(candidate, o.record)]
        if not eligible:
            return None
        return min(eligible, key=lambda o: (-o.similarity, o.record.id))
