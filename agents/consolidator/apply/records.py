"""The records a decision writes, as pure functions of the candidate, its target and `now`.

Kept apart from the writes so a decision's outcome (a merge's winner and
loser, a reinforcement, a resumed version) is testable without Postgres.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agents.consolidator.decide import RESTATED, Decision
from agents.consolidator.merge import merged_importance, union_entities, union_source
from agents.provenance import MAX_SOURCES, recent_metadata
from schemas import EmbeddedCandidate, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import content_hash, stable_id

REINFORCE_BOOST = 0.05


def new_record(item: EmbeddedCandidate, record_id: str, now: datetime) -> MemoryRecord:
    c = item.candidate
    return MemoryRecord(
        id=record_id,
        tenant_id=c.tenant_id,
        user_id=c.user_id,
        type=c.type,
        text=c.text,
        content_hash=content_hash(c.text),
        category=c.category,
        key_name=c.key_name,
        value=c.value,
        importance=c.importance,
        confidence=c.confidence,
        status=MemoryStatus.ACTIVE,
        observed_at=c.observed_at,
        created_at=now,
        updated_at=now,
        source=c.source,
        entities=c.entities,
        question=c.question,
        context=c.context,
    )


def context_vector(record: MemoryRecord, item: EmbeddedCandidate) -> list[float] | None:
    """The candidate's context vector when it is the record's (the record is this candidate's words in this
    context), else None: the store and the index keep the record's own (MemoryWriter.upsert, the qdrant sink)."""
    c = item.candidate
    if item.context_vector is None or not record.context or (record.context, record.text) != (c.context, c.text):
        return None
    return item.context_vector


def reinforced(target: MemoryRecord, item: EmbeddedCandidate, now: datetime) -> MemoryRecord:
    """The target stated again: stronger, its sources joined, observed since the earlier of both statements.

    A restatement that arrives late never moves the observation forward, and
    one observed before the record moves it back (decide.in_time makes sure
    no other version of a keyed fact lies between). The latest statement's
    time goes out as the change's `turn_ts`; the record keeps the earliest.
    A keyed fact also notes the other statement's time in its provenance
    (a `restated` entry): a different value observed between the two, arriving
    later, splits the version there (decide.in_time).
    """
    c = item.candidate
    noted: list[dict[str, Any]] = []
    if target.type is MemoryType.FACT and target.category and target.key_name:
        later, events = (
            (c.observed_at, c.source.event_ids) if c.observed_at >= target.observed_at else (target.observed_at, [])
        )
        noted = [{"source": RESTATED, "at": later.isoformat(), "event_ids": list(events)}]
    source = Provenance(
        session_id=target.source.session_id,
        event_ids=[*target.source.event_ids, *(e for e in c.source.event_ids if e not in target.source.event_ids)][
            -MAX_SOURCES:
        ],
        metadata=recent_metadata([*target.source.metadata, *c.source.metadata, *noted]),
    )
    return target.model_copy(
        update={
            "importance": min(1.0, max(target.importance, c.importance) + REINFORCE_BOOST),
            "confidence": max(target.confidence, c.confidence),
            "reinforcement_count": target.reinforcement_count + 1,
            "source": source,
            "observed_at": min(target.observed_at, c.observed_at),
            "updated_at": now,
            "version": target.version + 1,
        }
    )


def _merged_fields(existing: MemoryRecord, incoming: MemoryRecord, *, incoming_first: bool) -> dict[str, Any]:
    """What a merge winner takes from both sides; the winner's own source and entities come first."""
    first, second = (incoming, existing) if incoming_first else (existing, incoming)
    return {
        "importance": merged_importance(existing.importance, incoming.importance),
        "confidence": max(existing.confidence, incoming.confidence),
        "source": union_source(
            first.source,
            second.source,
            metadata=recent_metadata([*existing.source.metadata, *incoming.source.metadata]),
        ),
        "entities": union_entities(first.entities, second.entities),
        "reinforcement_count": existing.reinforcement_count + 1,
    }


def merge_records(item: EmbeddedCandidate, decision: Decision, now: datetime) -> tuple[MemoryRecord, MemoryRecord]:
    """(winner, loser) of a merge: one active record with the more specific text, the other `merged` into it.

    The candidate is always written as a row, so a redelivery finds it by id
    and replays instead of merging twice, and history shows both texts. When
    the candidate's text wins it is a new record (the candidate's id) and the
    old one is the loser; otherwise the old record absorbs the candidate.

    In time: the winner keeps its own observation and the loser was true until
    the later of both observations, so a point-in-time read shows the earlier
    text until the later statement, whichever arrived first, and no row is
    merged before it was observed.
    """
    target = decision.target
    if target is None:
        raise AssertionError("merge without a target")
    c = item.candidate
    merged_at = max(c.observed_at, target.observed_at)
    fresh = new_record(item, decision.record_id, now)
    if decision.candidate_wins:
        winner = fresh.model_copy(
            update={
                **_merged_fields(target, fresh, incoming_first=True),
                "access_count": target.access_count,
                "last_accessed_at": target.last_accessed_at,
            }
        )
        loser = target.model_copy(
            update={
                "status": MemoryStatus.MERGED,
                "superseded_at": merged_at,
                "superseded_by": winner.id,
                "updated_at": now,
                "version": target.version + 1,
            }
        )
        return winner, loser
    winner = target.model_copy(
        update={**_merged_fields(target, fresh, incoming_first=False), "updated_at": now, "version": target.version + 1}
    )
    loser = fresh.model_copy(
        update={"status": MemoryStatus.MERGED, "superseded_at": merged_at, "superseded_by": winner.id}
    )
    return winner, loser


def deleted(target: MemoryRecord, item: EmbeddedCandidate, now: datetime) -> MemoryRecord:
    """No longer true, and nothing replaces it: out of recall and the index, kept in history."""
    return target.model_copy(
        update={
            "status": MemoryStatus.DELETED,
            "superseded_at": item.candidate.observed_at,
            "updated_at": now,
            "version": target.version + 1,
        }
    )


def resumed(version: MemoryRecord, at: datetime, now: datetime) -> MemoryRecord:
    """The part of a keyed fact's version from its restatement at `at` on: a version of its own, which ends
    where the whole did; its provenance is the restatements from `at` on."""
    entries = [e for e in version.source.metadata if e.get("source") == RESTATED]
    kept = [e for e in entries if datetime.fromisoformat(str(e["at"])) >= at]
    events = list(dict.fromkeys(str(i) for e in kept for i in e.get("event_ids", [])))
    return version.model_copy(
        update={
            "id": stable_id(version.id, "resumed", at.isoformat()),
            "observed_at": at,
            "created_at": now,
            "updated_at": now,
            "version": 1,
            "reinforcement_count": max(0, len(kept) - 1),
            "source": Provenance(
                session_id=version.source.session_id,
                event_ids=events,
                metadata=[e for e in kept if datetime.fromisoformat(str(e["at"])) > at],
            ),
        }
    )
