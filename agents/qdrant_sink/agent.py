"""qdrant sink: the recall index follows `memory.changes`, idempotently.

Only active memories live in the index; any other status removes the point.
The last change of a record in a batch wins (changes are ordered per user).
A forgotten user (UserForgotten) loses every point of their scope, after the
changes that came before it and before those that come after.

Changes arrive sealed per user (services/archive/changes.py); each batch is
opened with one lookup of its users' keys. A change whose key is gone (the
user was forgotten) or that does not open is skipped and counted in
`memstream_changes_skipped_total{stage, reason}`, not dead-lettered: it is
no bad input, it is what forgetting is for. A value that is no message of
the topic at all goes to the DLQ as a schema violation, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import faust

from agents.stage import batched_agent
from agents.topics import Topics
from schemas import MemoryChange, MemoryRecord, MemoryStatus
from schemas.changes import SealedChangeMessage
from schemas.commands import ACCESS_REASON, UserForgotten
from services import metrics
from services.archive.changes import FORGOTTEN, UNREADABLE, open_messages
from services.faults import crash_point
from services.runtime import Runtime
from services.stores.vector import IndexedMemory, IndexPayload, Sparse

STAGE = "qdrant_sink"


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
    }


def plan(changes: list[MemoryChange], sparse: Any) -> tuple[list[IndexedMemory], list[str]]:
    """Collapse a batch into upserts and deletes, last change per record winning."""
    latest: dict[str, MemoryChange] = {}
    for change in changes:
        if change.reason != ACCESS_REASON:
            latest[change.record.id] = change
    upserts: list[IndexedMemory] = []
    deletes: list[str] = []
    for record_id, change in latest.items():
        record = change.record
        if record.status is MemoryStatus.ACTIVE and change.vector is not None:
            vec: Sparse = sparse(record.text)
            upserts.append(IndexedMemory(record_id, change.vector, vec, payload(record)))
        else:
            deletes.append(record_id)
    return upserts, deletes


async def apply_changes(rt: Runtime, changes: Sequence[MemoryChange | UserForgotten]) -> None:
    """Runs of record changes, each collapsed; a forgotten user's scope is emptied where it stands in the batch."""
    run: list[MemoryChange] = []
    for change in changes:
        if isinstance(change, UserForgotten):
            await _apply_run(rt, run)
            run = []
            await rt.index.delete_scope(change.tenant_id, change.user_id)
            metrics.EVENTS_OUT.labels(stage=STAGE, topic="qdrant").inc()
        else:
            run.append(change)
    await _apply_run(rt, run)


async def _apply_run(rt: Runtime, changes: list[MemoryChange]) -> None:
    upserts, deletes = plan(changes, rt.bm25.document)
    await rt.index.upsert(upserts)
    await rt.index.delete(deletes)
    now = datetime.now(UTC)
    for change in changes:
        if change.turn_ts is not None:
            metrics.FRESHNESS.labels(store="qdrant").observe((now - change.turn_ts).total_seconds())
    metrics.EVENTS_OUT.labels(stage=STAGE, topic="qdrant").inc(len(upserts) + len(deletes))


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings

    rt.open_keys()  # the master key now: changes are opened with the users' keys
    for reason in (FORGOTTEN, UNREADABLE):  # both series exist from the start
        metrics.CHANGES_SKIPPED.labels(stage=STAGE, reason=reason)

    async def handle(messages: list[SealedChangeMessage]) -> None:
        changes, skipped = await open_messages(rt.keys, [message.root for message in messages])
        await apply_changes(rt, changes)
        for reason, count in skipped.items():
            metrics.CHANGES_SKIPPED.labels(stage=STAGE, reason=reason).inc(count)
        crash_point(s, "qdrant_sink.after_index")

    batched_agent(
        app,
        topics.changes,
        topics.dlq,
        s,
        stage=STAGE,
        model=SealedChangeMessage,
        size=s.consolidate_batch_size,
        within=s.consolidate_batch_within,
        handle=handle,
    )
