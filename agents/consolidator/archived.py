"""Commands in `memory.archive`: sealed there as they are applied, and replayed from there by a generation.

The default generation's commands stage applies what the read service sends
on `memory.commands` (short retention) and, in the same transaction, queues
each applied command for the archive (through the outbox, so a crash neither
loses one nor seals one twice): sealed with its user's data key, in the order
the user's commands were applied. A forget is the exception: its user's key
goes with it, so it is archived as a `forgotten` marker in clear (ids and
time, nothing else). Access marks are read traffic, not memory: never archived.

Every other generation's commands stage reads its commands from the archive
instead (its own group; chat events are the window's and are passed over), so
a generation needs nothing from a topic that expires. The rebuild's two phases
stay: first the archive's chat events through every stage with this stage
held, then this stage from the archive's beginning, so a delete or correction
meets the memory the events re-derived (services/rebuild/generation.py).

A replayed forget is skipped when its user holds a key again: every key the
user had before the forget was deleted by it, so the user came back, and all
a generation can open of theirs was sealed after the forget; applying it
there (in the second phase, after everything else) would erase the returning
user.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.dlq import DeadLetters
from agents.stage import HANDLING_REASONS, consume_parsed
from schemas import partition_key
from schemas.commands import AccessCommand, AnyCommand, ForgetUser
from services.archive.codec import (
    EVENT_TYPES,
    ArchiveRecord,
    DataKey,
    RecordRejected,
    forget_of,
    forgotten,
    open_command,
    read_record,
    seal_command,
)
from services.archive.keys import KeyStore
from services.core import metrics
from services.core import topics as topic_names
from services.core.config import Settings
from services.core.errors import InvalidEvent
from services.core.textutil import stable_id
from services.stores.postgres import OutboxMessage

UNREADABLE = "archive_unreadable"
Owner = tuple[str, str]


def archived(command: AnyCommand) -> bool:
    """Whether an applied command goes to the archive: everything that shapes memory, not access marks."""
    return not isinstance(command, AccessCommand)


def archive_message(command: AnyCommand, key: DataKey | None) -> OutboxMessage:
    """The command's archive record as an outbox row: sealed with `key`, or for a forget the marker in clear."""
    if isinstance(command, ForgetUser):
        value = forgotten(command)
    elif key is None:
        raise ValueError(f"command {command.command_id} needs its user's key to be archived")
    else:
        value = seal_command(key, command)
    return OutboxMessage(
        id=stable_id("outbox", command.tenant_id, command.user_id, "command", command.command_id, "archive"),
        scope=partition_key(command.tenant_id, command.user_id).decode(),
        topic=topic_names.ARCHIVE,
        key=command.key,
        value=value,
    )


def parse(raw: bytes | None) -> ArchiveRecord:
    """The record's clear fields; InvalidEvent when it is not an archive record at all."""
    try:
        return read_record(raw)
    except RecordRejected as exc:
        raise InvalidEvent(UNREADABLE, str(exc)) from None


@dataclass
class Replay:
    """What a batch of archive records gives the commands stage: its commands in order, and what was passed over."""

    commands: list[AnyCommand] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def replayed(records: Sequence[ArchiveRecord], current: Mapping[Owner, DataKey]) -> Replay:
    """The commands inside `records`, in order, with `current` (each user's key now); pure.

    Chat events are skipped (`events`: the window's), commands whose key is
    gone (`forgotten`), forgets of users who came back (`returned`, see the
    module doc). A command record that does not open with its user's current
    key raises InvalidEvent, so `deliver` dead-letters that record alone.
    """
    out = Replay()
    for record in records:
        key = current.get(record.owner)
        if record.type in EVENT_TYPES:
            out.skipped["events"] += 1
        elif record.type == "forgotten" and key is not None:
            out.skipped["returned"] += 1
        elif record.type == "forgotten":
            out.commands.append(_opened(record, None))
        elif key is None or key.key_id != record.key_id:
            out.skipped["forgotten"] += 1
        else:
            out.commands.append(_opened(record, key))
    return out


def _opened(record: ArchiveRecord, key: DataKey | None) -> AnyCommand:
    """The command a record holds (a forget needs no key); InvalidEvent when it does not open."""
    try:
        return forget_of(record) if key is None else open_command(record, key)
    except RecordRejected as exc:
        raise InvalidEvent(UNREADABLE, str(exc)) from None


def consume_archive(
    app: Any,
    source: Any,
    dlq_topic: Any,
    settings: Settings,
    *,
    keys: KeyStore,
    stage: str,
    handle: Callable[[list[ArchiveRecord]], Awaitable[None]],
) -> None:
    """Register the stage's agent on `memory.archive`: records parsed, the unparsable dead-lettered, batches handled."""
    dlq = DeadLetters(dlq_topic, settings.max_message_bytes, keys)
    for reason in (UNREADABLE, *HANDLING_REASONS):  # zero series: increase() counts the first
        metrics.DLQ.labels(stage=stage, reason=reason)

    async def run(stream: Any) -> None:
        await consume_parsed(
            stream,
            parse,
            handle,
            dlq,
            stage,
            size=settings.consolidate_batch_size,
            within=settings.consolidate_batch_within,
            max_delay=settings.retry_max_backoff,
        )

    app.agent(source, name=stage)(run)
