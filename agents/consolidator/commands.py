"""commands: the consolidator's side of `memory.commands`, the only way a person changes memory.

A batch is applied in one Postgres transaction, holding the lock of every
user it names (services/stores/postgres/locks.py), each user's commands in
log order, each once (applied_commands): access marks from recall (tallied,
one row update per memory per run of marks, kept in Postgres and never
published), manual adds, corrections,
deletes (one, by session, by topic), forgetting a user and imports. What a
command did is recorded with its claim (the read service's `?wait=true`
reads it) and its changes go to `memory.changes` through the outbox of the
same transaction, so a crash after the commit loses none; a change is sealed
with its user's data key as it is queued (services/archive/changes.py). The rules are
pure functions in agents.consolidator.command_plan.

Every applied command but an access mark is also queued for `memory.archive`
in the same transaction, sealed with its user's key (a forget: a marker in
clear), so a rebuild replays commands from the archive alone; a generation's
commands stage reads them from there (agents/consolidator/archived.py).

New text (an add, a correction, an imported memory without a usable
vector) is embedded here, with the worker's model, in one batch before the
transaction: the same model as every other memory, and a replay of the log
re-derives the same vectors.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType

import faust

from agents.consolidator import archived as archive
from agents.consolidator import command_plan as plan
from agents.consolidator.apply.candidate import apply_candidate
from agents.outbox import publish
from agents.stage import batched_agent
from agents.topics import Topics
from schemas import ChangeOp, MemoryChange, MemoryStatus, partition_key
from schemas.commands import (
    AccessCommand,
    AddMemory,
    AnyCommand,
    CommandMessage,
    CorrectMemory,
    DeleteMemory,
    DeleteSession,
    DeleteTopic,
    ForgetUser,
    ImportPart,
    UserForgotten,
)
from services.archive.changes import ChangeSealer
from services.archive.codec import ArchiveRecord
from services.core import metrics
from services.core import topics as topic_names
from services.core.command_rules import matches_topic
from services.core.textutil import stable_id
from services.runtime import Runtime
from services.stores.postgres import Conn, OutboxMessage
from services.stores.postgres.commands import Access, CommandStore
from services.stores.postgres.export import write_memories, write_sessions, write_summaries, write_turns
from services.stores.postgres.forget import forget_user
from services.stores.postgres.locks import lock_users

STAGE = "commands"
ACCESS_STAGE = "commands_access"  # a generation's: access marks only
log = logging.getLogger(__name__)
Published = MemoryChange | UserForgotten


def tally(commands: list[AccessCommand]) -> list[Access]:
    """One user's commands as one access per memory: how many recalls, and the latest, in first-seen order.

    One row update per memory per batch, however many recalls returned it.
    """
    seen: dict[str, Access] = {}
    for cmd in commands:
        for memory_id, hits, at in cmd.marks():
            before = seen.get(memory_id)
            seen[memory_id] = (
                Access(memory_id, hits, at)
                if before is None
                else Access(memory_id, before.hits + hits, max(before.at, at))
            )
    return list(seen.values())


@dataclass
class Applied:
    """What a batch publishes, in commit order: its changes' outbox rows, then its archive records.

    Each change is sealed as it is queued, in the batch's transaction (`sealer`), so what the outbox holds and
    what `publish` sends are the same bytes. Access marks publish nothing.
    """

    sealer: ChangeSealer
    changes: list[OutboxMessage] = field(default_factory=list)
    # memory.archive records of the applied commands (and leftovers of their scopes), in order.
    archive: list[OutboxMessage] = field(default_factory=list)

    async def outbox(self, changes: Sequence[Published], command_id: str) -> list[OutboxMessage]:
        rows = []
        for change, (key, value) in zip(changes, await self.sealer.seal(changes), strict=True):
            record_part = (
                [change.record.id, str(change.record.version)] if isinstance(change, MemoryChange) else ["forgotten"]
            )
            rows.append(
                OutboxMessage(
                    id=stable_id("outbox", change.tenant_id, change.user_id, "command", command_id, *record_part),
                    scope=partition_key(change.tenant_id, change.user_id).decode(),
                    topic=topic_names.CHANGES,
                    key=key,
                    value=value,
                )
            )
        self.changes += rows
        return rows

    def forget(self, tenant_id: str, user_id: str) -> None:
        """A forgotten user's earlier changes in this batch are never published (their outbox rows are gone too),
        and their key is gone: a later change of theirs in the batch is sealed with a new one."""
        scope = partition_key(tenant_id, user_id).decode()
        self.changes = [m for m in self.changes if m.scope != scope]
        self.archive = [m for m in self.archive if m.scope != scope]
        self.sealer.forgotten(tenant_id, user_id)

    @property
    def rows(self) -> list[OutboxMessage]:
        return [*self.changes, *self.archive]


async def embed_texts(rt: Runtime, commands: Sequence[AnyCommand]) -> tuple[dict[str, list[float]], str]:
    """Every new text of the batch through the model at once: text → vector, and the model's name.

    An imported memory needs one only when the document has none of this model's.
    """
    model = await rt.embedder()
    texts: list[str] = []
    for cmd in commands:
        if isinstance(cmd, AddMemory | CorrectMemory):
            texts.append(cmd.text)
        elif isinstance(cmd, ImportPart) and cmd.embedding_model != model.name:
            texts.extend(r.text for r in cmd.memories)
        elif isinstance(cmd, ImportPart):
            texts.extend(r.text for r in cmd.memories if r.id not in cmd.vectors)
    unique = list(dict.fromkeys(texts))
    if not unique:
        return {}, model.name
    vectors = await asyncio.to_thread(model.embed, unique)
    return dict(zip(unique, vectors, strict=True)), model.name


async def apply_commands(rt: Runtime, store: CommandStore, batch: list[AnyCommand]) -> Applied:
    """One transaction: each user's commands in order, each once; returns what to publish."""
    vectors, model = await embed_texts(rt, batch) if _needs_model(batch) else ({}, "")
    now = datetime.now(UTC)
    by_user: dict[tuple[str, str], list[AnyCommand]] = defaultdict(list)
    for cmd in batch:
        by_user[(cmd.tenant_id, cmd.user_id)].append(cmd)
    async with rt.pg.transaction("apply_commands") as conn:
        await lock_users(conn, by_user)
        applied = Applied(ChangeSealer(rt.keys, conn))
        for (tenant_id, user_id), commands in by_user.items():
            marks: list[AccessCommand] = []
            for cmd in commands:
                if isinstance(cmd, AccessCommand):
                    marks.append(cmd)
                    continue
                await _mark(store, conn, tenant_id, user_id, marks)
                marks = []
                if await store.claim(conn, tenant_id, user_id, [cmd.command_id]):
                    await _apply_one(rt, store, conn, cmd, vectors, model, now, applied)
                    if rt.settings.generation is None and archive.archived(cmd):
                        await _archive(rt, conn, cmd, applied)
            await _mark(store, conn, tenant_id, user_id, marks)
    return applied


def _needs_model(batch: Sequence[AnyCommand]) -> bool:
    return any(isinstance(c, AddMemory | CorrectMemory | ImportPart) for c in batch)


async def _mark(store: CommandStore, conn: Conn, tenant_id: str, user_id: str, commands: list[AccessCommand]) -> None:
    """A run of access marks: claimed together, one update per memory; claims that marked nothing are dropped.

    Nothing is published: access is read traffic, kept in Postgres only, so
    reads never grow `memory.changes` (which keeps every message forever).
    """
    if not commands:
        return
    fresh = await store.claim(conn, tenant_id, user_id, [c.command_id for c in commands])
    # A command repeated within the batch is claimed once and counted once.
    new = list({c.command_id: c for c in commands if c.command_id in fresh}.values())
    if not await store.mark_accessed(conn, tenant_id, user_id, tally(new)):
        await store.release(conn, tenant_id, user_id, [c.command_id for c in new])


async def _apply_one(
    rt: Runtime,
    store: CommandStore,
    conn: Conn,
    cmd: AnyCommand,
    vectors: dict[str, list[float]],
    model: str,
    now: datetime,
    applied: Applied,
) -> None:
    cause = [cmd.command_id]
    changes: list[MemoryChange] = []
    if isinstance(cmd, AddMemory):
        item = plan.add_candidate(cmd, vectors[cmd.text], model)
        _, changes = await apply_candidate(rt.memories, conn, item, now)
    elif isinstance(cmd, CorrectMemory):
        held = await rt.memories.with_vector(conn, cmd.tenant_id, cmd.user_id, cmd.memory_id)
        if held is not None and held[0].status is MemoryStatus.ACTIVE:
            old, new = plan.corrected(held[0], cmd, now)
            vector = vectors[cmd.text]
            # The old version leaves the active indexes (a keyed fact's unique one) before the new one enters.
            await rt.memories.upsert(conn, old, None)
            await rt.memories.upsert(conn, new, vector)
            changes = [
                plan.change(old, ChangeOp.SUPERSEDED, None, cause, now, "corrected"),
                plan.change(new, ChangeOp.ADDED, vector, cause, now, "corrected"),
            ]
    elif isinstance(cmd, DeleteMemory | DeleteSession | DeleteTopic):
        changes = await _delete(rt, store, conn, cmd, now)
    elif isinstance(cmd, ForgetUser):
        deleted = await forget_user(conn, cmd.tenant_id, cmd.user_id)
        applied.forget(cmd.tenant_id, cmd.user_id)
        gone = UserForgotten(
            tenant_id=cmd.tenant_id, user_id=cmd.user_id, cause=cause, committed_at=now, deleted_rows=deleted
        )
        # After the forget: its own outbox row is the only one of the scope, deleted once it is sent.
        await rt.outbox.add(conn, await applied.outbox([gone], cmd.command_id))
        return
    elif isinstance(cmd, ImportPart):
        changes = await _import(rt, conn, cmd, vectors, model, now)
    await store.record_outcome(conn, cmd.tenant_id, cmd.user_id, cmd.command_id, plan.outcome(changes))
    await rt.outbox.add(conn, await applied.outbox(changes, cmd.command_id))


async def _archive(rt: Runtime, conn: Conn, cmd: AnyCommand, applied: Applied) -> None:
    """Queue the applied command's archive record, after the scope's unsent archive records (the user's order).

    The user's key is asked for now, in the transaction: a forget earlier in
    the batch deleted it, so a later command is sealed with a new one.
    """
    scope = partition_key(cmd.tenant_id, cmd.user_id).decode()
    leftovers = [m for m in await rt.outbox.pending(conn, scope) if m.topic == topic_names.ARCHIVE]
    owner = (cmd.tenant_id, cmd.user_id)
    key = None if isinstance(cmd, ForgetUser) else (await rt.keys.for_writing(conn, [owner]))[owner]
    row = archive.archive_message(cmd, key)
    await rt.outbox.add(conn, [row])
    applied.archive += [*leftovers, row]


async def _delete(
    rt: Runtime, store: CommandStore, conn: Conn, cmd: DeleteMemory | DeleteSession | DeleteTopic, now: datetime
) -> list[MemoryChange]:
    if isinstance(cmd, DeleteMemory):
        held = await rt.memories.with_vector(conn, cmd.tenant_id, cmd.user_id, cmd.memory_id)
        targets = [held[0]] if held is not None and held[0].status is MemoryStatus.ACTIVE else []
        reason = "deleted"
    elif isinstance(cmd, DeleteSession):
        targets = await store.active(conn, cmd.tenant_id, cmd.user_id, session_id=cmd.session_id, lock=True)
        reason = f"deleted with session {cmd.session_id}"
    else:
        rows = await store.active(conn, cmd.tenant_id, cmd.user_id, lock=True)
        targets = [record for record in rows if matches_topic(record, cmd.topic)]
        reason = f"deleted by topic {cmd.topic!r}"
    changes = []
    for target in targets:
        gone = plan.retire(target, MemoryStatus.DELETED, cmd.at, now)
        await rt.memories.upsert(conn, gone, None)
        changes.append(plan.change(gone, ChangeOp.DELETED, None, [cmd.command_id], now, reason))
    return changes


async def _import(
    rt: Runtime, conn: Conn, cmd: ImportPart, vectors: dict[str, list[float]], model: str, now: datetime
) -> list[MemoryChange]:
    owner = (cmd.tenant_id, cmd.user_id)
    key = (await rt.keys.for_writing(conn, [owner]))[owner]
    memories = plan.imported_memories(cmd, model, key)
    rows = [(i.record, i.vector if i.vector is not None else vectors[i.record.text], i.doc_id) for i in memories]
    await write_memories(rt.memories, conn, rows)
    await write_turns(conn, plan.imported_turns(cmd))
    await write_sessions(conn, cmd.tenant_id, cmd.user_id, plan.imported_sessions(cmd))
    await write_summaries(conn, cmd.tenant_id, cmd.user_id, cmd.session_summaries)
    cause = [cmd.command_id, cmd.import_id]
    return [plan.change(record, plan.import_op(record), vector, cause, now, "imported") for record, vector, _ in rows]


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings
    rt.open_keys()  # the master key now: changes are sealed per user
    by_name = topics.by_name()
    store = CommandStore()

    async def apply_and_publish(commands: list[AnyCommand]) -> None:
        """One transaction, then its changes and archive records, in commit order (the relay resends leftovers)."""
        await publish(rt.outbox, by_name, STAGE, (await apply_commands(rt, store, commands)).rows)

    if s.hold_commands:
        log.info("commands held until the archive's chat events are through (a generation's rebuild, first phase)")
        return
    if s.generation:
        keys = rt.open_keys()

        async def replay(records: list[ArchiveRecord]) -> None:
            found = archive.replayed(records, await keys.current({r.owner for r in records}))
            if found.commands:
                await apply_and_publish(found.commands)
            if found.skipped["forgotten"]:
                metrics.ARCHIVE_SKIPPED.labels(reason="forgotten").inc(found.skipped["forgotten"])

        # A generation's commands come from memory.archive, which keeps them; memory.commands gives it
        # only access marks, which are reads and never archived, so the serving generation counts them too.
        archive.consume_archive(app, topics.archive, topics.dlq, s, keys=keys, stage=STAGE, handle=replay)

        async def access_only(batch: list[CommandMessage]) -> None:
            marks: list[AnyCommand] = [m.root for m in batch if isinstance(m.root, AccessCommand)]
            if marks:
                await apply_and_publish(marks)

        batched_agent(
            app,
            topics.commands,
            topics.dlq,
            s,
            keys=keys,
            stage=ACCESS_STAGE,
            model=CommandMessage,
            size=s.consolidate_batch_size,
            within=s.consolidate_batch_within,
            handle=access_only,
        )
        return

    async def handle(batch: list[CommandMessage]) -> None:
        await apply_and_publish([message.root for message in batch])

    batched_agent(
        app,
        topics.commands,
        topics.dlq,
        s,
        keys=rt.keys,
        stage=STAGE,
        model=CommandMessage,
        size=s.consolidate_batch_size,
        within=s.consolidate_batch_within,
        handle=handle,
    )


# agents.app reaches every stage as `<package>.agent`; this module is a stage of
# its own inside the consolidator package, so it is its own `agent`.
agent: ModuleType = sys.modules[__name__]
