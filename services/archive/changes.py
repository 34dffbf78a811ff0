"""`memory.changes` sealed per user: sealing in the writer's transaction, opening a batch with one key lookup.

Every change that carries a record goes out as a SealedChange
(schemas/changes.py) sealed with the user's archive data key; `forgotten`
messages go out in clear. Forgetting deletes the key, so a forgotten
user's changes stay on the log but no subscriber, index sink or rebuild can
read them again.

Writers: `ChangeSealer` inside the transaction that commits the changes, so
the key it seals with is the one the transaction sees (created in it when
the user has none: `KeyStore.for_writing`), and a change of a user forgotten
in the same transaction is sealed with the user's new key, never the deleted one.

Readers: `open_changes` (raw values) or `open_messages` (parsed), one
`KeyStore.current` query per batch. A change whose key is gone — the user
was forgotten, or forgotten and came back with a new key — is skipped and
counted `forgotten`; one that does not open with its user's key (tampered
with, or not a change inside) is skipped and counted `unreadable`; a value
that is no message of the topic at all is counted `malformed`. None of them
is an error: the caller decides (the qdrant sink dead-letters malformed
values, since its batch parser never hands them over).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import orjson
from pydantic import ValidationError

from schemas import MemoryChange, codec
from schemas.changes import SEALED_SCHEMA_VERSION, SealedChange, SealedChangeMessage
from schemas.commands import UserForgotten
from services.archive.codec import DataKey, RecordRejected, open_plain, seal_plain
from services.archive.keys import KeyStore, Owner
from services.stores.postgres.pool import Conn

log = logging.getLogger(__name__)

Opened = MemoryChange | UserForgotten
Wire = SealedChange | UserForgotten
Message = tuple[bytes, bytes]  # (Kafka key, value)

# Why a message was skipped (the `reason` of memstream_changes_skipped_total).
FORGOTTEN = "forgotten"
UNREADABLE = "unreadable"
MALFORMED = "malformed"


def seal_change(key: DataKey, change: MemoryChange) -> bytes:
    """The SealedChange of `change`: the change as it serializes in clear, inside; the routing fields outside."""
    plain = codec.dumps(change)
    header = SealedChange(
        schema_version=SEALED_SCHEMA_VERSION,
        tenant_id=change.tenant_id,
        user_id=change.user_id,
        op=change.op,
        memory_id=change.record.id,
        version=change.record.version,
        type=change.record.type,
        status=change.record.status,
        committed_at=orjson.loads(plain)["committed_at"],  # as serialized, so it compares equal after opening
        cause=list(change.cause),
        key_id=key.key_id,
        nonce="",
        ciphertext="",
    )
    return codec.dumps(header.model_copy(update=seal_plain(key, header, plain)))


def open_change(envelope: SealedChange, key: DataKey) -> MemoryChange:
    """The change inside; RecordRejected unless `key` sealed it, nothing changed and it matches its envelope."""
    what = f"change of {envelope.memory_id} v{envelope.version}"
    plain = open_plain(envelope, key, what)
    try:
        inside = orjson.loads(plain)
        change = MemoryChange.model_validate(inside)
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise RecordRejected(f"{what}: the sealed value is not a change: {exc}") from None
    record = change.record
    clear = (
        change.tenant_id,
        change.user_id,
        change.op,
        record.id,
        record.version,
        record.type,
        record.status,
        inside["committed_at"],
        change.cause,
    )
    outside = (
        envelope.tenant_id,
        envelope.user_id,
        envelope.op,
        envelope.memory_id,
        envelope.version,
        envelope.type,
        envelope.status,
        envelope.committed_at,
        envelope.cause,
    )
    if clear != outside or (record.tenant_id, record.user_id) != envelope.owner:
        raise RecordRejected(f"{what}: the sealed change does not match its envelope")
    return change


def read_change(raw: bytes | None) -> Wire:
    """A message's clear form, without opening it (no key needed); RecordRejected when it is none."""
    if raw is None:
        raise RecordRejected("an empty message")
    try:
        return SealedChangeMessage.model_validate(orjson.loads(raw)).root
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise RecordRejected(f"not a memory.changes message: {exc}") from None


def open_with(keys: Mapping[Owner, DataKey], messages: Sequence[Wire]) -> tuple[list[Opened], Counter[str]]:
    """Every message that opens with the keys at hand, in order, and how many were skipped, by reason."""
    skipped: Counter[str] = Counter()
    opened: list[Opened] = []
    for message in messages:
        if isinstance(message, UserForgotten):
            opened.append(message)
            continue
        key = keys.get(message.owner)
        if key is None or key.key_id != message.key_id:
            skipped[FORGOTTEN] += 1
            continue
        try:
            opened.append(open_change(message, key))
        except RecordRejected as exc:
            skipped[UNREADABLE] += 1
            log.warning("memory.changes message of %s skipped: %s", message.owner, exc)
    return opened, skipped


async def open_messages(keys: KeyStore, messages: Sequence[Wire]) -> tuple[list[Opened], Counter[str]]:
    """`open_with` the keys the owners have now: one Postgres query for the whole batch."""
    owners = {m.owner for m in messages if isinstance(m, SealedChange)}
    return open_with(await keys.current(owners), messages)


async def open_changes(keys: KeyStore, raw_values: Iterable[bytes | None]) -> tuple[list[Opened], Counter[str]]:
    """A batch of raw `memory.changes` values (of any generation) opened, in order; skips counted by reason.

    The one way to read the topic: every consumer (the qdrant sink, `rebuild
    store`, `memstream changes`, tests) goes through here or `open_messages`.
    """
    parsed: list[Wire] = []
    malformed = 0
    for raw in raw_values:
        try:
            parsed.append(read_change(raw))
        except RecordRejected as exc:
            malformed += 1
            log.warning("memory.changes value skipped: %s", exc)
    opened, skipped = await open_messages(keys, parsed)
    if malformed:
        skipped[MALFORMED] += malformed
    return opened, skipped


class ChangeSealer:
    """Seals one transaction's changes; each owner's key is looked up (or created) once, in that transaction."""

    def __init__(self, keys: KeyStore, conn: Conn) -> None:
        self._keys = keys
        self._conn = conn
        self._held: dict[Owner, DataKey] = {}

    async def seal(self, changes: Sequence[Opened]) -> list[Message]:
        """(key, value) per change, in order: record changes sealed, `forgotten` messages in clear."""
        owners = {(c.tenant_id, c.user_id) for c in changes if isinstance(c, MemoryChange)}
        missing = owners - self._held.keys()
        if missing:
            self._held |= await self._keys.for_writing(self._conn, missing)
        return [
            (
                c.key,
                codec.dumps(c)
                if isinstance(c, UserForgotten)
                else seal_change(self._held[(c.tenant_id, c.user_id)], c),
            )
            for c in changes
        ]

    def forgotten(self, tenant_id: str, user_id: str) -> None:
        """The transaction deleted the user's key (forget_user): a later change of theirs gets a new one."""
        self._held.pop((tenant_id, user_id), None)


async def seal_changes(keys: KeyStore, conn: Conn, changes: Sequence[Opened]) -> list[Message]:
    """One transaction's changes as the messages to publish (see ChangeSealer)."""
    return await ChangeSealer(keys, conn).seal(changes)
