"""One candidate: decided (by the rules, or the model's verdict) and written in the batch's transaction.

The small actions are written here; a merge, a statement in time (history)
and a replay in their own modules.
"""

from __future__ import annotations

from datetime import datetime

from agents.consolidator import importance as imp
from agents.consolidator.apply.changes import change, retired_op
from agents.consolidator.apply.context import BatchContext
from agents.consolidator.apply.history import cut, history
from agents.consolidator.apply.merge import merge
from agents.consolidator.apply.records import context_vector, deleted, new_record, reinforced
from agents.consolidator.apply.replay import replayed
from agents.consolidator.apply.retraction import is_retraction, take_back
from agents.consolidator.decide import Action, Decision, Neighbours, decide
from agents.consolidator.llm import Verdict
from agents.consolidator.merge import Similar
from schemas import ChangeOp, EmbeddedCandidate, MemoryChange, MemoryStatus, MemoryType
from services.core.textutil import content_hash
from services.llm import Action as LlmAction
from services.stores.postgres import Conn, MemoryWriter


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
        return decision, [change(gone, ChangeOp.DELETED, item, now, reason=decision.reason)]
    if decision.action is Action.MERGED and near is not None and ctx is not None:
        return decision, await merge(pg, conn, item, decision, near, ctx, now)
    if decision.action is Action.ADD:
        record = new_record(item, decision.record_id, now)
        await pg.upsert(conn, record, item.vector, context_vector(record, item))
        if ctx is not None:
            ctx.added(item, record)
        retired = await take_back(pg, conn, item, record, now, ctx) if is_retraction(record) else []
        return decision, [*retired, change(record, ChangeOp.ADDED, item, now)]
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
            change(old, ChangeOp.SUPERSEDED, item, now, reason=why),
            change(record, ChangeOp.ADDED, item, now, reason=why),
        ]
    if decision.action is Action.HISTORY:
        return decision, await history(pg, conn, item, decision, now, ctx)
    if decision.action is Action.REINFORCE and target is not None:
        record = reinforced(target, item, now)
        await pg.upsert(conn, record, None)
        if ctx is not None:
            ctx.view.wrote(record, None)
        op = ChangeOp.UPDATED if record.status is MemoryStatus.ACTIVE else retired_op(record)
        return decision, [*await cut(pg, conn, item, decision, now, ctx), change(record, op, item, now)]
    if target is None:
        raise AssertionError(f"{decision.action} without a target")
    return decision, await replayed(pg, conn, item, target, now)
