"""The recall index fed from `memory.changes`: changes turned into points and deletes, applied idempotently.

One code for every writer of the index from the change log: the index stage
(agents/qdrant_sink), the read service's follower of a rebuilt generation
(services/api/index_follower.py), and `memstream rebuild index`, which
writes the point of a stored row as the stage would (`indexed`).

Only active memories live in the index; any other status removes the point.
The last change of a record in a batch wins (changes are ordered per user).
A forgotten user (UserForgotten) loses every point of their scope, after the
changes that came before it and before those that come after.

An exchange's point carries its context legs (services.stores.vector): the
BM25 one is encoded here from the record's context, the dense one comes
with the change. Only the change that wrote the record carries it (the
consolidator's add); a later change of the same record (reinforced, decayed
by maintenance, imported) does not, and the record's context never changes,
so the point keeps the dense context vector the index already holds for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from schemas import MemoryChange, MemoryRecord, MemoryStatus
from schemas.commands import ACCESS_REASON, UserForgotten
from services.core import metrics
from services.core.stages import INDEX_STAGE
from services.stores.vector import Bm25Encoder, IndexedMemory, IndexPayload, VectorIndex


class IndexTarget(Protocol):
    """What applying changes needs: the index and the BM25 encoder of its settings (a Runtime, or its view)."""

    @property
    def index(self) -> VectorIndex: ...

    @property
    def bm25(self) -> Bm25Encoder: ...


def payload(record: MemoryRecord) -> IndexPayload:
    return {
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "type": record.type.value,
        "status": record.status.value,
        "text": record.text,
        "category": record.category,
        "key_name": record.key_name,
        "value": record.value,
        "importance": record.importance,
        "access_count": record.access_count,
        "observed_at": record.observed_at.isoformat(),
        "observed_ts": record.observed_at.timestamp(),
        "entities": record.entities,
        "source": record.source.model_dump(mode="json"),
        "version": record.version,
        # Recall ranks and filters from the hit alone: recency counts from the
        # later of observation and last access; compressed episodes are opt-in.
        "last_accessed_at": None if record.last_accessed_at is None else record.last_accessed_at.isoformat(),
        "compressed": record.compressed,
        # In the context legs (fusion scores a memory without them on its own text for both).
        "has_context": bool(record.context),
    }


def indexed(
    record: MemoryRecord, vector: list[float], context_vector: list[float] | None, bm25: Bm25Encoder
) -> IndexedMemory:
    """The point of an active record: own vectors, and context ones for a record with context."""
    return IndexedMemory(
        record.id,
        vector,
        bm25.document(record.text),
        payload(record),
        dense_ctx=context_vector if record.context else None,
        sparse_ctx=bm25.context_document(record.context, record.text),
    )


def plan(changes: list[MemoryChange], bm25: Bm25Encoder) -> tuple[list[IndexedMemory], list[str]]:
    """Collapse a batch into upserts and deletes, last change per record winning.

    A record's dense context vector is the last one a change of the batch
    carried (see the module doc); a point still without one is completed by
    `with_stored_context`.
    """
    latest: dict[str, MemoryChange] = {}
    context_vectors: dict[str, list[float]] = {}
    for change in changes:
        if change.context_vector is not None:
            context_vectors[change.record.id] = change.context_vector
        if change.reason != ACCESS_REASON:
            latest[change.record.id] = change
    upserts: list[IndexedMemory] = []
    deletes: list[str] = []
    for record_id, change in latest.items():
        record = change.record
        if record.status is MemoryStatus.ACTIVE and change.vector is not None:
            upserts.append(indexed(record, change.vector, context_vectors.get(record_id), bm25))
        else:
            deletes.append(record_id)
    return upserts, deletes


def lacking_context(points: Sequence[IndexedMemory]) -> list[str]:
    """Points in the BM25 context leg but without a dense context vector: the index may hold it."""
    return [p.id for p in points if p.sparse_ctx is not None and p.dense_ctx is None]


def with_stored_context(points: list[IndexedMemory], stored: dict[str, list[float]]) -> list[IndexedMemory]:
    return [replace(p, dense_ctx=stored[p.id]) if p.dense_ctx is None and p.id in stored else p for p in points]


async def apply_changes(target: IndexTarget, changes: Sequence[MemoryChange | UserForgotten]) -> None:
    """Runs of record changes, each collapsed; a forgotten user's scope is emptied where it stands in the batch.

    Idempotent: a batch applied twice (a restart before its offsets were committed) leaves the same index.
    """
    run: list[MemoryChange] = []
    for change in changes:
        if isinstance(change, UserForgotten):
            await _apply_run(target, run)
            run = []
            await target.index.delete_scope(change.tenant_id, change.user_id)
            metrics.EVENTS_OUT.labels(stage=INDEX_STAGE, topic="qdrant").inc()
        else:
            run.append(change)
    await _apply_run(target, run)


async def _apply_run(target: IndexTarget, changes: list[MemoryChange]) -> None:
    upserts, deletes = plan(changes, target.bm25)
    if lacking := lacking_context(upserts):
        upserts = with_stored_context(upserts, await target.index.context_vectors(lacking))
    await target.index.upsert(upserts)
    await target.index.delete(deletes)
    now = datetime.now(UTC)
    for change in changes:
        if change.turn_ts is not None:
            metrics.FRESHNESS.labels(store="qdrant").observe((now - change.turn_ts).total_seconds())
    metrics.EVENTS_OUT.labels(stage=INDEX_STAGE, topic="qdrant").inc(len(upserts) + len(deletes))


def count_skipped(stage: str, skipped: Mapping[str, int]) -> None:
    """Changes that did not open (services/archive/changes.py): no error, what forgetting is for; counted."""
    for reason, count in skipped.items():
        metrics.CHANGES_SKIPPED.labels(stage=stage, reason=reason).inc(count)
