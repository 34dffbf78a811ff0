"""commands: the consolidator's side of `memory.commands` (access marks from recall).

The read service never writes: each recall sends one AccessCommand naming
the memories it returned, and this agent applies a batch of them in one
Postgres transaction, once each (applied_commands), then publishes every
changed record on `memory.changes` as `updated`, so the index payload's
access count and last access follow.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from datetime import UTC, datetime
from types import ModuleType

import faust

from agents.stage import batched_agent, forward
from agents.topics import Topics
from schemas import ChangeOp, MemoryChange
from schemas.commands import ACCESS_REASON, AccessCommand
from services.runtime import Runtime
from services.stores.postgres.commands import Access, CommandStore

STAGE = "commands"
_store = CommandStore()


def tally(commands: list[AccessCommand]) -> list[Access]:
    """One user's commands as one access per memory: how many marks, and the latest, in first-seen order.

    One row update per memory per batch, however many recalls returned it.
    """
    seen: dict[str, Access] = {}
    for cmd in commands:
        for memory_id in dict.fromkeys(cmd.memory_ids):
            before = seen.get(memory_id)
            seen[memory_id] = (
                Access(memory_id, 1, cmd.at)
                if before is None
                else Access(memory_id, before.hits + 1, max(before.at, cmd.at))
            )
    return list(seen.values())


async def apply_commands(rt: Runtime, batch: list[AccessCommand]) -> list[MemoryChange]:
    """One transaction: claim the batch's new commands, mark their memories, return the changes to publish."""
    now = datetime.now(UTC)
    by_user: dict[tuple[str, str], list[AccessCommand]] = defaultdict(list)
    for cmd in batch:
        by_user[(cmd.tenant_id, cmd.user_id)].append(cmd)
    changes: list[MemoryChange] = []
    async with rt.pg.transaction("apply_commands") as conn:
        for (tenant_id, user_id), commands in by_user.items():
            fresh = await _store.claim(conn, tenant_id, user_id, [c.command_id for c in commands])
            # A command repeated within the batch is claimed once and counted once.
            new = list({c.command_id: c for c in commands if c.command_id in fresh}.values())
            marked = await _store.mark_accessed(conn, tenant_id, user_id, tally(new), now)
            causes = [c.command_id for c in new]
            changes.extend(
                MemoryChange(
                    tenant_id=tenant_id,
                    user_id=user_id,
                    op=ChangeOp.UPDATED,
                    record=record,
                    vector=vector,
                    cause=causes,
                    committed_at=now,
                    reason=ACCESS_REASON,
                )
                for record, vector in marked
            )
    return changes


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings

    async def handle(batch: list[AccessCommand]) -> None:
        await forward(topics.changes, STAGE, await apply_commands(rt, batch))

    batched_agent(
        app,
        topics.commands,
        topics.dlq,
        s,
        stage=STAGE,
        model=AccessCommand,
        size=s.consolidate_batch_size,
        within=s.consolidate_batch_within,
        handle=handle,
    )


# agents.app reaches every stage as `<package>.agent`; this module is a stage of
# its own inside the consolidator package, so it is its own `agent`.
agent: ModuleType = sys.modules[__name__]
