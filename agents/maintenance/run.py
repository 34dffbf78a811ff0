"""One maintenance pass: per user, plan, write and queue the changes in one transaction, then publish.

Maintenance writes like the consolidator does: deterministic ids, every
changed record's version bumped once, and its `memory.changes` (sealed with
the user's data key, services/archive/changes.py) in the outbox of the same
transaction, so a crash after the commit loses no change (the relay, or this
pass's own publish, sends them) and a re-run plans nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.plan import Effect, plan_user
from agents.maintenance.synthesis import Synthesis, new_topics, with_texts, worded
from schemas import MemoryChange, partition_key
from services.archive.changes import Message, seal_changes
from services.archive.keys import KeyStore
from services.core import topics
from services.core.textutil import stable_id
from services.stores.postgres import MemoryWriter, Outbox, OutboxMessage, PgPool
from services.stores.postgres.locks import lock_users
from services.stores.postgres.maintenance import load_user, users_with_active_memories

log = logging.getLogger(__name__)
Publish = Callable[[Sequence[OutboxMessage]], Awaitable[None]]


def change_of(effect: Effect, now: datetime, committed_at: datetime) -> MemoryChange:
    record = effect.record
    return MemoryChange(
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        op=effect.op,
        record=record,
        vector=effect.vector,
        cause=[f"maintenance:{now.isoformat()}"],
        committed_at=committed_at,
        reason=effect.reason,
    )


def outbox_message(change: MemoryChange, sealed: Message) -> OutboxMessage:
    """The sealed change's row, keyed by record and version: the same change of a re-run is the same row."""
    r = change.record
    key, value = sealed
    return OutboxMessage(
        id=stable_id("outbox", r.tenant_id, r.user_id, "maintenance", r.id, str(r.version)),
        scope=partition_key(r.tenant_id, r.user_id).decode(),
        topic=topics.CHANGES,
        key=key,
        value=value,
    )


async def _worded_topics(
    pool: PgPool, tenant_id: str, user_id: str, now: datetime, rules: Rules, synthesis: Synthesis
) -> dict[str, str]:
    """The model's wording of the topics this pass will add, planned on a plain read (no row locks held)."""
    async with pool.connection("maintenance_plan") as conn:
        rows = await load_user(conn, tenant_id, user_id)
    effects, _ = plan_user(rows.records, rows.vectors, rows.synthesized, now, rules)
    if not new_topics(effects):
        return {}
    return await worded(effects, {r.id: r.text for r in rows.records}, synthesis)


async def maintain_user(
    pool: PgPool,
    outbox: Outbox,
    keys: KeyStore,
    tenant_id: str,
    user_id: str,
    now: datetime,
    rules: Rules,
    synthesis: Synthesis | None = None,
) -> tuple[list[OutboxMessage], Counter[str]]:
    """`synthesis` (the LLM's) words new semantic memories; without it they keep the rule text."""
    texts = {} if synthesis is None else await _worded_topics(pool, tenant_id, user_id, now, rules, synthesis)
    writer = MemoryWriter()
    async with pool.transaction("maintenance") as conn:
        # The user's lock, then the rows: no consolidator batch or command changes them until the commit.
        await lock_users(conn, [(tenant_id, user_id)])
        rows = await load_user(conn, tenant_id, user_id)
        effects, counts = plan_user(rows.records, rows.vectors, rows.synthesized, now, rules)
        effects = with_texts(effects, texts)
        # Superseded and pruned rows first: a new version never meets its predecessor's active row.
        for effect in sorted(effects, key=lambda e: e.record.status.value == "active"):
            await writer.upsert(conn, effect.record, effect.vector)
        committed_at = datetime.now(UTC)
        changes = [change_of(e, now, committed_at) for e in effects]
        sealed = await seal_changes(keys, conn, changes)
        messages = [outbox_message(c, m) for c, m in zip(changes, sealed, strict=True)]
        await outbox.add(conn, messages)
    return messages, counts


async def run_pass(
    pool: PgPool,
    outbox: Outbox,
    rules: Rules,
    now: datetime,
    publish: Publish,
    tenant_id: str | None = None,
    user_id: str | None = None,
    synthesis: Synthesis | None = None,
    *,
    keys: KeyStore,
) -> Counter[str]:
    """Tend every user in scope; counts per effect (decayed, pruned, patterns, compressed, semantic, ...).

    `keys` seal each user's changes (the process's master key: the worker's Runtime.keys, or the one
    `memstream maintain` loads).
    """
    totals: Counter[str] = Counter()
    users = await users_with_active_memories(pool, tenant_id, user_id)
    for tenant, user in users:
        messages, counts = await maintain_user(pool, outbox, keys, tenant, user, now, rules, synthesis)
        await publish(messages)
        totals.update(counts)
    totals["users"] = len(users)
    log.info("maintenance as of %s: %s", now.isoformat(), dict(totals))
    return totals
