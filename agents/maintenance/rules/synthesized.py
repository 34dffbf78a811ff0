"""The records patterns and topics write: one memory built from its members, their provenance's union.

A synthesized record names its members (`memory_ids`) in its provenance, so
a later pass knows what it already covers (`covered`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agents.provenance import recent_metadata
from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import content_hash

SYNTHESIZED_IMPORTANCE = 0.6
MAX_ENTITIES = 20


def union_provenance(members: Sequence[MemoryRecord], synthesis: dict[str, Any]) -> Provenance:
    """Every member's event ids (in observation order, once) and per-turn metadata, the latest member's session.

    The metadata is bounded like any merged provenance (`recent_metadata`: the
    newest entries); the synthesis entry goes last, so it is always among them.
    """
    ordered = sorted(members, key=lambda r: (r.observed_at, r.id))
    event_ids = list(dict.fromkeys(e for r in ordered for e in r.source.event_ids))
    turns = [m for r in ordered for m in r.source.metadata if "synthesized" not in m]
    return Provenance(
        session_id=ordered[-1].source.session_id,
        event_ids=event_ids,
        metadata=recent_metadata([*turns, synthesis]),
    )


def synthesized(
    record_id: str,
    type_: MemoryType,
    text: str,
    category: str | None,
    members: Sequence[MemoryRecord],
    now: datetime,
    key_name: str | None = None,
) -> MemoryRecord:
    latest = max(members, key=lambda r: (r.observed_at, r.id))
    ids = sorted(r.id for r in members)
    sessions = sorted({r.source.session_id for r in members})
    entities = sorted({e for r in members for e in r.entities})[:MAX_ENTITIES]
    return MemoryRecord(
        id=record_id,
        tenant_id=latest.tenant_id,
        user_id=latest.user_id,
        type=type_,
        text=text,
        content_hash=content_hash(text),
        category=category,
        key_name=key_name,
        importance=SYNTHESIZED_IMPORTANCE,
        confidence=round(sum(r.confidence for r in members) / len(members), 6),
        status=MemoryStatus.ACTIVE,
        observed_at=latest.observed_at,
        created_at=now,
        updated_at=now,
        source=union_provenance(members, {"synthesized": type_.value, "memory_ids": ids, "session_ids": sessions}),
        entities=entities,
    )


def covered(record: MemoryRecord) -> set[str]:
    """The member ids a synthesized record says it was built from."""
    return {i for m in record.source.metadata for i in m.get("memory_ids", [])}
