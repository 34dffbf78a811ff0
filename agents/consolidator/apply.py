"""Applying consolidation decisions inside the batch's Postgres transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from agents.consolidator.decide import Action, Decision, Neighbours, decide
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.stores.postgres import Conn, MemoryWriter
from services.textutil import content_hash

REINFORCE_BOOST = 0.05
MAX_SOURCES = 50
# Provenance metadata kept per record: a memory.changes message carries it
# whole, so it must stay far below the broker's message limit.
MAX_METADATA_BYTES = 64 * 1024


def recent_metadata(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest entries (at most MAX_SOURCES) whose JSON fits in MAX_METADATA_BYTES."""
    kept: list[dict[str, Any]] = []
    size = 0
    for entry in reversed(entries[-MAX_SOURCES:]):
        size += len(orjson.dumps(entry))
        if size > MAX_METADATA_BYTES:
            break
        kept.append(entry)
    return kept[::-1]


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
    )


def reinforced(target: MemoryRecord, item: EmbeddedCandidate, now: datetime) -> MemoryRecord:
    c = item.candidate
    source = Provenance(
        session_id=target.source.session_id,
        event_ids=[*target.source.event_ids, *(e for e in c.source.event_ids if e not in target.source.event_ids)][
            -MAX_SOURCES:
        ],
        metadata=recent_metadata([*target.source.metadata, *c.source.metadata]),
    )
    return target.model_copy(
        update={
            "importance": min(1.0, max(target.importance, c.importance) + REINFORCE_BOOST),
            "confidence": max(target.confidence, c.confidence),
            "reinforcement_count": target.reinforcement_count + 1,
            "source": source,
            "updated_at": now,
            "version": target.version + 1,
        }
    )


async def _neighbours(pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate) -> Neighbours:
    c = item.candidate
    fact_key = (c.category, c.key_name) if c.type is MemoryType.FACT and c.category and c.key_name else None
    found = await pg.neighbours(conn, c.tenant_id, c.user_id, c.candidate_id, c.type, content_hash(c.text), fact_key)
    return Neighbours(same_id=found.get("id"), same_content=found.get("content"), active_fact=found.get("fact"))


def _change(record: MemoryRecord, op: ChangeOp, item: EmbeddedCandidate, now: datetime) -> MemoryChange:
    active = record.status is MemoryStatus.ACTIVE
    return MemoryChange(
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        op=op,
        record=record,
        vector=item.vector if active else None,
        cause=item.candidate.source.event_ids,
        committed_at=now,
        turn_ts=item.candidate.observed_at,
    )


async def apply_candidate(
    pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, now: datetime
) -> tuple[Decision, list[MemoryChange]]:
    decision = decide(item.candidate, await _neighbours(pg, conn, item))
    target = decision.target
    if decision.action is Action.ADD:
        record = new_record(item, decision.record_id, now)
        await pg.upsert(conn, record, item.vector)
        return decision, [_change(record, ChangeOp.ADDED, item, now)]
    if decision.action is Action.SUPERSEDE and target is not None:
        record = new_record(item, decision.record_id, now)
        old = target.model_copy(
            update={
                "status": MemoryStatus.SUPERSEDED,
                "superseded_at": item.candidate.observed_at,
                "superseded_by": record.id,
                "updated_at": now,
                "version": target.version + 1,
            }
        )
        # The old row leaves the unique active-fact index before the new one enters it.
        await pg.upsert(conn, old, None)
        await pg.upsert(conn, record, item.vector)
        return decision, [_change(old, ChangeOp.SUPERSEDED, item, now), _change(record, ChangeOp.ADDED, item, now)]
    if decision.action is Action.REINFORCE and target is not None:
        record = reinforced(target, item, now)
        await pg.upsert(conn, record, None)
        return decision, [_change(record, ChangeOp.UPDATED, item, now)]
    if target is None:
        raise AssertionError(f"{decision.action} without a target")
    # Replayed: publish the current state again (the first publish may have
    # been lost between commit and send), including anything it superseded.
    changes = [_change(target, ChangeOp.ADDED if target.version == 1 else ChangeOp.UPDATED, item, now)]
    for old in await pg.superseded_by(conn, target.tenant_id, target.user_id, target.id):
        changes.append(_change(old, ChangeOp.SUPERSEDED, item, now))
    return decision, changes
