"""Applying consolidation decisions inside the batch's Postgres transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import orjson

from agents.consolidator import importance as imp
from agents.consolidator.decide import RESTATED, Action, Decision, Neighbours, decide
from agents.consolidator.llm import Verdict
from agents.consolidator.merge import (
    MERGE_TYPES,
    BatchView,
    Similar,
    merged_importance,
    union_entities,
    union_source,
)
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import content_hash, stable_id
from services.llm import Action as LlmAction
from services.stores.postgres import Conn, MemoryWriter
from services.stores.postgres.memory_writes import Probe

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


Scope = tuple[str, str, MemoryType]


class BatchContext:
    """What one batch's decisions share: the batch-level lookups and what the batch has written.

    Built with two queries for the whole batch (nearest mergeable neighbours,
    per-type centroids), never one per candidate.
    """

    def __init__(self, merge_similarity: float | None, min_importance: float) -> None:
        self.merge_similarity = merge_similarity
        self.min_importance = min_importance
        self.view = BatchView()
        self.nearest: dict[int, list[Similar]] = {}
        self.centroids: dict[Scope, imp.Centroid] = {}

    @classmethod
    async def load(
        cls,
        pg: MemoryWriter,
        conn: Conn,
        batch: list[EmbeddedCandidate],
        merge_similarity: float | None,
        min_importance: float,
    ) -> BatchContext:
        ctx = cls(merge_similarity, min_importance)
        mergeable = [i for i, item in enumerate(batch) if item.candidate.type in MERGE_TYPES]
        if merge_similarity is not None and mergeable:
            probes = [_probe(batch[i]) for i in mergeable]
            found = await pg.nearest_batch(conn, probes)
            ctx.nearest = {
                mergeable[pos]: [Similar(n.record, n.similarity, n.vector) for n in hits] for pos, hits in found.items()
            }
        by_dim: dict[int, set[Scope]] = {}
        for item in batch:
            by_dim.setdefault(len(item.vector), set()).add(_scope(item))
        for dim, scopes in by_dim.items():
            for scope, (total, count) in (await pg.centroids(conn, sorted(scopes), dim)).items():
                ctx.centroids[scope] = imp.Centroid(total, count)
        return ctx

    def importance(self, item: EmbeddedCandidate) -> float:
        return imp.importance(item.candidate, item.vector, self.centroids.get(_scope(item)))

    def added(self, item: EmbeddedCandidate, record: MemoryRecord) -> None:
        """A new active memory: later candidates of the batch see it (merge target, centroid)."""
        self.view.wrote(record, item.vector)
        scope = _scope(item)
        if scope in self.centroids and len(self.centroids[scope].total) == len(item.vector):
            self.centroids[scope].add(item.vector)
        else:
            self.centroids[scope] = imp.Centroid(np.asarray(item.vector, dtype=np.float64), 1)


def _scope(item: EmbeddedCandidate) -> Scope:
    return (item.tenant_id, item.user_id, item.candidate.type)


def _probe(item: EmbeddedCandidate) -> Probe:
    return Probe(item.tenant_id, item.user_id, item.candidate.type, item.vector)


async def _neighbours(pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, similar: Similar | None) -> Neighbours:
    c = item.candidate
    fact_key = (c.category, c.key_name) if c.type is MemoryType.FACT and c.category and c.key_name else None
    found = await pg.neighbours(conn, c.tenant_id, c.user_id, c.candidate_id, c.type, content_hash(c.text), fact_key)
    versions = () if fact_key is None else tuple(await pg.fact_versions(conn, c.tenant_id, c.user_id, *fact_key))
    return Neighbours(
        same_id=found.get("id"),
        same_content=found.get("content"),
        active_fact=found.get("fact"),
        versions=versions,
        similar=None if similar is None else similar.record,
        similarity=0.0 if similar is None else similar.similarity,
    )


def _change(
    record: MemoryRecord,
    op: ChangeOp,
    item: EmbeddedCandidate,
    now: datetime,
    *,
    vector: list[float] | None = None,
    reason: str | None = None,
) -> MemoryChange:
    """`vector` defaults to the candidate's: right whenever the record's text is the candidate's."""
    active = record.status is MemoryStatus.ACTIVE
    return MemoryChange(
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        op=op,
        record=record,
        vector=(item.vector if vector is None else vector) if active else None,
        context_vector=context_vector(record, item) if active else None,
        cause=item.candidate.source.event_ids,
        committed_at=now,
        turn_ts=item.candidate.observed_at,
        reason=reason,
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


async def _merge(
    pg: MemoryWriter,
    conn: Conn,
    item: EmbeddedCandidate,
    decision: Decision,
    near: Similar,
    ctx: BatchContext,
    now: datetime,
) -> list[MemoryChange]:
    winner, loser = merge_records(item, decision, now)
    reason = f"similarity {decision.similarity:.3f}"
    winner_vector = item.vector if decision.candidate_wins else near.vector
    # The loser leaves the active indexes (a keyed fact's unique one too) before the winner is written.
    if decision.candidate_wins:
        await pg.upsert(conn, loser, None)
        await pg.upsert(conn, winner, item.vector, context_vector(winner, item))
    else:
        await pg.upsert(conn, loser, item.vector, context_vector(loser, item))
        await pg.upsert(conn, winner, None)
    ctx.view.wrote(loser, None)
    ctx.view.wrote(winner, winner_vector)
    if decision.candidate_wins:
        ctx.added(item, winner)
    return [
        _change(loser, ChangeOp.MERGED, item, now, reason=reason),
        _change(
            winner,
            ChangeOp.ADDED if decision.candidate_wins else ChangeOp.UPDATED,
            item,
            now,
            vector=winner_vector,
            reason=reason,
        ),
    ]


async def _llm_decision(
    pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, found: Neighbours, verdict: Verdict
) -> Decision | None:
    """The model's verdict as a decision, or None where the rule path decides (see agents.consolidator.llm)."""
    c = item.candidate
    if found.same_id or found.same_content or found.active_fact or verdict.action is LlmAction.ADD:
        return None
    if verdict.action is LlmAction.NONE:
        return Decision(Action.IGNORED, c.candidate_id, reason=verdict.describe())
    held = None if verdict.target_id is None else await pg.with_vector(conn, c.tenant_id, c.user_id, verdict.target_id)
    if held is None or held[0].status is not MemoryStatus.ACTIVE:
        return None  # merged or retired since the model looked
    target = held[0]
    if c.observed_at < target.observed_at:
        # Said before the target: the target replaced it, not the other way round.
        if verdict.action is LlmAction.DELETE:
            return Decision(Action.IGNORED, c.candidate_id, reason=f"{verdict.describe()}; observed before its target")
        return Decision(
            Action.HISTORY,
            c.candidate_id,
            target,
            reason=verdict.describe(),
            ends_at=target.observed_at,
            ends_by=target.id,
        )
    action = Action.SUPERSEDE if verdict.action is LlmAction.UPDATE else Action.DELETED
    return Decision(action, c.candidate_id, target, reason=verdict.describe())


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


async def apply_candidate(
    pg: MemoryWriter,
    conn: Conn,
    item: EmbeddedCandidate,
    now: datetime,
    ctx: BatchContext | None = None,
    position: int = 0,
    verdict: Verdict | None = None,
) -> tuple[Decision, list[MemoryChange]]:
    """Decide and write one candidate; `ctx` (the batch's lookups) enables merge and the importance floor.

    `verdict` is the LLM's, asked before the transaction; the rule path decides when there is none.
    """
    if ctx is not None:
        score = ctx.importance(item)
        item = item.model_copy(update={"candidate": item.candidate.model_copy(update={"importance": score})})
        keep = imp.kept(item.candidate.type, score, ctx.min_importance, imp.THRESHOLD_SCOPE)
        near = (
            None
            if ctx.merge_similarity is None
            else ctx.view.best(item.candidate, item.vector, ctx.nearest.get(position, []), ctx.merge_similarity)
        )
        found = await _neighbours(pg, conn, item, near)
        merge_similarity = ctx.merge_similarity
    else:
        near, keep, merge_similarity = None, True, None
        found = await _neighbours(pg, conn, item, None)
    by_model = None if verdict is None else await _llm_decision(pg, conn, item, found, verdict)
    decision = by_model or decide(item.candidate, found, merge_similarity=merge_similarity, keep=keep)
    target = decision.target
    if decision.action in (Action.SKIPPED, Action.IGNORED):
        return decision, []
    if decision.action is Action.DELETED and target is not None:
        gone = deleted(target, item, now)
        await pg.upsert(conn, gone, None)
        if ctx is not None:
            ctx.view.wrote(gone, None)
        return decision, [_change(gone, ChangeOp.DELETED, item, now, reason=decision.reason)]
    if decision.action is Action.MERGED and near is not None and ctx is not None:
        return decision, await _merge(pg, conn, item, decision, near, ctx, now)
    if decision.action is Action.ADD:
        record = new_record(item, decision.record_id, now)
        await pg.upsert(conn, record, item.vector, context_vector(record, item))
        if ctx is not None:
            ctx.added(item, record)
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
        await pg.upsert(conn, record, item.vector, context_vector(record, item))
        if ctx is not None:
            ctx.view.wrote(old, None)
            ctx.added(item, record)
        why = decision.reason
        return decision, [
            _change(old, ChangeOp.SUPERSEDED, item, now, reason=why),
            _change(record, ChangeOp.ADDED, item, now, reason=why),
        ]
    if decision.action is Action.HISTORY:
        return decision, await _history(pg, conn, item, decision, now, ctx)
    if decision.action is Action.REINFORCE and target is not None:
        record = reinforced(target, item, now)
        await pg.upsert(conn, record, None)
        if ctx is not None:
            ctx.view.wrote(record, None)
        op = ChangeOp.UPDATED if record.status is MemoryStatus.ACTIVE else _retired_op(record)
        return decision, [*await _cut(pg, conn, item, decision, now, ctx), _change(record, op, item, now)]
    if target is None:
        raise AssertionError(f"{decision.action} without a target")
    return decision, await _replayed(pg, conn, item, target, now)


async def _cut(
    pg: MemoryWriter,
    conn: Conn,
    item: EmbeddedCandidate,
    decision: Decision,
    now: datetime,
    ctx: BatchContext | None,
    *,
    status: MemoryStatus | None = None,
) -> list[MemoryChange]:
    """The version before the candidate's time now ends at its observation, followed by the decision's record."""
    if decision.cut is None:
        return []
    cut = decision.cut.model_copy(
        update={
            "status": status or decision.cut.status,
            "superseded_at": item.candidate.observed_at,
            "superseded_by": decision.record_id,
            "updated_at": now,
            "version": decision.cut.version + 1,
        }
    )
    await pg.upsert(conn, cut, None)
    if ctx is not None:
        ctx.view.wrote(cut, None)
    return [_change(cut, _retired_op(cut), item, now, reason=decision.reason)]


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


async def _history(
    pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, decision: Decision, now: datetime, ctx: BatchContext | None
) -> list[MemoryChange]:
    """A statement observed before the current version: a superseded version, true from its observation until
    `ends_at` (or, inside a version stated again later, until that restatement, from which the version's value
    holds again as a version of its own), with its vector (a point-in-time read matches it). The current version
    is not touched, unless it is the one split."""
    changes: list[MemoryChange] = []
    ends_at, ends_by = decision.ends_at, decision.ends_by
    if decision.split_at is not None and decision.cut is not None:
        held = await pg.with_vector(conn, item.tenant_id, item.user_id, decision.cut.id)
        part = resumed(decision.cut, decision.split_at, now)
        ends_at, ends_by = part.observed_at, part.id
        # The cut version leaves the active-fact index before its resumed part may enter it.
        changes += await _cut(pg, conn, item, decision, now, ctx, status=MemoryStatus.SUPERSEDED)
        vector = None if held is None else held[1]
        await pg.upsert(conn, part, vector)
        if ctx is not None:
            ctx.view.wrote(part, vector)
        op = ChangeOp.ADDED if part.status is MemoryStatus.ACTIVE else _retired_op(part)
        changes.append(_change(part, op, item, now, vector=vector, reason=decision.reason))
    record = new_record(item, decision.record_id, now).model_copy(
        update={"status": MemoryStatus.SUPERSEDED, "superseded_at": ends_at, "superseded_by": ends_by}
    )
    await pg.upsert(conn, record, item.vector, context_vector(record, item))
    if ctx is not None:
        ctx.view.wrote(record, None)
    changes.append(_change(record, ChangeOp.SUPERSEDED, item, now, reason=decision.reason))
    if decision.split_at is None:
        changes += await _cut(pg, conn, item, decision, now, ctx)
    return changes


_RETIRED_OPS = {
    MemoryStatus.MERGED: ChangeOp.MERGED,
    MemoryStatus.DELETED: ChangeOp.DELETED,
    MemoryStatus.PRUNED: ChangeOp.DELETED,
}


def _retired_op(record: MemoryRecord) -> ChangeOp:
    return _RETIRED_OPS.get(record.status, ChangeOp.SUPERSEDED)


async def _replayed(
    pg: MemoryWriter, conn: Conn, item: EmbeddedCandidate, target: MemoryRecord, now: datetime
) -> list[MemoryChange]:
    """Publish the current state again (the first publish may have been lost between commit and send).

    With what the target superseded or absorbed; a candidate that lost a merge
    re-publishes itself (`merged`) and its winner, with the winner's own vector.
    """
    if target.status is MemoryStatus.MERGED and target.superseded_by is not None:
        changes = [_change(target, ChangeOp.MERGED, item, now)]
        found = await pg.with_vector(conn, target.tenant_id, target.user_id, target.superseded_by)
        if found is not None and found[0].status is MemoryStatus.ACTIVE and found[1] is not None:
            changes.append(_change(found[0], ChangeOp.UPDATED, item, now, vector=found[1]))
        return changes
    vector = None
    if target.content_hash != content_hash(item.candidate.text):
        # A merge survivor with other words than this candidate: its own vector, not the candidate's.
        found = await pg.with_vector(conn, target.tenant_id, target.user_id, target.id)
        vector = None if found is None else found[1]
    op = ChangeOp.ADDED if target.version == 1 else ChangeOp.UPDATED
    if target.status is not MemoryStatus.ACTIVE:  # a past version (history)
        op = _retired_op(target)
    changes = [_change(target, op, item, now, vector=vector)]
    for old in await pg.superseded_by(conn, target.tenant_id, target.user_id, target.id):
        changes.append(_change(old, _retired_op(old), item, now))
    return changes
