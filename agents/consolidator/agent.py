"""consolidator: the single writer of long-term memory.

One Postgres transaction per batch, holding the lock of every user in it
(services/stores/postgres/locks.py); changes go out only after it commits,
sealed in it with each user's data key (services/archive/changes.py).
With an LLM configured, the model's ADD/UPDATE/DELETE/NONE verdicts are
asked before the transaction and applied inside it (agents.consolidator.llm).
"""

from __future__ import annotations

from datetime import UTC, datetime

import faust

from agents.consolidator import llm
from agents.consolidator.apply.candidate import apply_candidate
from agents.consolidator.apply.context import BatchContext
from agents.consolidator.decide import Action
from agents.consolidator.questions import resolve_questions
from agents.dlq import DeadLetters
from agents.stage import batched_agent, send_all
from agents.topics import Topics
from schemas import EmbeddedCandidate, MemoryChange
from services.archive.changes import Message, seal_changes
from services.core import metrics
from services.core.faults import crash_point
from services.runtime import Runtime
from services.stores.postgres.locks import lock_users

STAGE = "consolidator"


async def consolidate(
    rt: Runtime, batch: list[EmbeddedCandidate], verdicts: dict[int, llm.Verdict] | None = None
) -> list[Message]:
    """The batch's `memory.changes` messages, sealed; `verdicts` (by batch position) are the LLM's.

    Without verdicts every candidate takes the rule path. Sealing happens in
    the transaction: a user's missing key is created with their first memory.
    """
    verdicts = verdicts or {}
    now = datetime.now(UTC)
    changes: list[MemoryChange] = []
    kinds: list[str] = []
    s = rt.settings
    async with rt.pg.transaction("consolidate") as conn:
        # Before any read: every decision is made on rows no other writer changes until the commit.
        await lock_users(conn, ((item.tenant_id, item.user_id) for item in batch))
        # Two queries for the whole batch (merge neighbours, importance centroids).
        ctx = await BatchContext.load(rt.memories, conn, batch, s.merge_similarity, s.min_importance)
        for position, item in enumerate(batch):
            verdict = verdicts.get(position)
            decision, produced = await apply_candidate(rt.memories, conn, item, now, ctx, position, verdict)
            kinds.append(decision.action.value)
            changes.extend(produced)
        changes.extend(await resolve_questions(rt.memories, conn, batch, now))
        messages = await seal_changes(rt.keys, conn, changes)
    committed = datetime.now(UTC)
    for kind in kinds:
        metrics.DECISIONS.labels(kind=kind).inc()
    for item in batch:
        metrics.FRESHNESS.labels(store="postgres").observe((committed - item.candidate.observed_at).total_seconds())
    return messages


async def with_memory_ids(rt: Runtime, batch: list[EmbeddedCandidate]) -> list[EmbeddedCandidate]:
    """The batch with each candidate's content-derived id turned into its memory id under its user's key.

    Every id a memory gets starts here (superseding versions and merges derive
    theirs from it), so no id on memory.changes, the archive or the index can
    be recomputed from content once forgetting has destroyed the key.
    """
    async with rt.pg.transaction("memory_ids") as conn:
        keys = await rt.keys.for_writing(conn, {(i.candidate.tenant_id, i.candidate.user_id) for i in batch})
    return [
        i.model_copy(
            update={
                "candidate": i.candidate.model_copy(
                    update={
                        "candidate_id": keys[i.candidate.tenant_id, i.candidate.user_id].memory_id(
                            i.candidate.candidate_id
                        )
                    }
                )
            }
        )
        for i in batch
    ]


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    for action in Action:  # every kind has a series from the start
        metrics.DECISIONS.labels(kind=action.value)
    rt.open_keys()  # the master key now: changes are sealed per user
    dlq = DeadLetters(topics.dlq, s.max_message_bytes, rt.keys)
    if rt.llm is not None:
        llm.declare()
        metrics.DLQ.labels(stage=STAGE, reason=llm.LLM_INVALID_OUTPUT)

    async def handle(arrived: list[EmbeddedCandidate]) -> None:
        batch = await with_memory_ids(rt, arrived)
        messages = await consolidate(rt, batch, await llm.verdicts(rt, batch, dlq, STAGE, arrived))
        crash_point(s, "consolidator.after_commit")
        await send_all(topics.changes, STAGE, messages)

    batched_agent(
        app,
        topics.embedded,
        topics.dlq,
        s,
        keys=rt.keys,
        stage=STAGE,
        model=EmbeddedCandidate,
        size=s.consolidate_batch_size,
        within=s.consolidate_batch_within,
        handle=handle,
    )
