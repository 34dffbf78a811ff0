"""The archive record, the sealing both logs share, and the key wrapping: pure AES-GCM, no I/O.

Every property is a unit test. Two envelopes are sealed the same way
(`seal_plain` / `open_plain`): the archive record below and the
`memory.changes` change (schemas/changes.py, services/archive/changes.py).
Each names its owner and key id in clear and binds all its clear fields as
associated data; only the plaintext and the associated data's encoding differ.

A record of `memory.archive` is a JSON envelope (format `v` 1):

    {"v": 1, "tenant_id", "user_id", "event_id", "session_id", "ts", "type", "key_id", "nonce", "ciphertext"}

`type` says what is inside: a chat event (`turn`, `session_end`), a memory
command as the commands stage applied it (`command`: event_id is the command
id, session_id empty, ts the command's `at`), or the one record in clear,
`forgotten` (ids only, no key, nothing sealed): a forgotten user's key is
gone, so the marker that tells followers to forget them cannot be sealed.

In clear is only what routing and replay need: tenant and user (the Kafka key,
and whose data key opens the record), the event id (replays drop repeats by
it), the session id and ts (a replay can order and select by them without
keys), the event type and the key id. The ciphertext is the whole event as
`chat.turns` carried it (content, role, turn index, metadata, and the ids
again). Every clear field is associated data of the encryption, so a record
cannot be edited, or moved to another user, event or key, without failing to
open. Forgetting a user deletes their data key: the ciphertext stays in the
log, the ids and timestamps stay readable, the rest is gone for good.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import uuid
from dataclasses import dataclass, field
from typing import Literal, Protocol

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, ConfigDict, ValidationError

from schemas import SessionEvent, TurnEvent, chat_event_adapter, codec
from schemas.commands import AnyCommand, ForgetUser, command_adapter
from services.core.textutil import keyed_id

FORMAT: Literal[1] = 1
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # random per record; a user's key seals far fewer than the 2^32 records that bound allows
_RECORD_AAD = b"memstream.archive.v1"
_WRAP_AAD = b"memstream.data-key.v1"
_MASTER_ID_LABEL = b"memstream.master-key-id.v1"
_MEMORY_IDS_LABEL = b"memstream.memory-ids.v1"
RecordType = Literal["turn", "session_end", "command", "forgotten"]
EVENT_TYPES: frozenset[str] = frozenset({"turn", "session_end"})
# What base64 and the envelope add to a sealed command: a command is cut to fit in
# `sealable_bytes(max_message_bytes)` so that its archive record fits in a message.
_ENVELOPE_BYTES = 1024


class RecordRejected(ValueError):
    """A record that cannot be opened with the key at hand: malformed, tampered with, or another key's."""


class Envelope(Protocol):
    """A sealed message as sealing sees it: whose it is, which key, and the clear fields it binds."""

    @property
    def owner(self) -> tuple[str, str]: ...

    @property
    def key_id(self) -> str: ...

    @property
    def nonce(self) -> str: ...

    @property
    def ciphertext(self) -> str: ...

    def associated_data(self) -> bytes: ...


@dataclass(frozen=True)
class DataKey:
    """One user's data key, unwrapped; its bytes stay out of reprs and logs."""

    tenant_id: str
    user_id: str
    key_id: str
    secret: bytes = field(repr=False)

    @property
    def owner(self) -> tuple[str, str]:
        return self.tenant_id, self.user_id

    def memory_id(self, derived: str) -> str:
        """The id a memory derived as `derived` (its candidate id, from its content) has under this user's key.

        Content-derived ids would let anyone with a dictionary recover a
        forgotten value from an id kept on memory.changes; under a key that
        forgetting destroys they are just random. A key of its own (derived,
        labelled) so the id never reveals anything about the sealing key.
        """
        return keyed_id(hmac.new(self.secret, _MEMORY_IDS_LABEL, hashlib.sha256).digest(), derived)


@dataclass(frozen=True)
class MasterKey:
    """The key that wraps every data key; `key_id` is a digest that names it without revealing it."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != KEY_BYTES:
            raise ValueError(f"a master key is {KEY_BYTES} bytes, not {len(self.secret)}")

    @property
    def key_id(self) -> str:
        return hmac.new(self.secret, _MASTER_ID_LABEL, hashlib.sha256).hexdigest()[:16]

    @classmethod
    def from_base64(cls, text: str) -> MasterKey:
        try:
            return cls(base64.b64decode(text.strip(), validate=True))
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"a master key is base64 of {KEY_BYTES} random bytes: {exc}") from None

    @staticmethod
    def generate_base64() -> str:
        return base64.b64encode(os.urandom(KEY_BYTES)).decode()


class ArchiveRecord(BaseModel):
    """The envelope as it travels; `nonce` and `ciphertext` are base64."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[1]
    tenant_id: str
    user_id: str
    event_id: str
    session_id: str
    ts: str
    type: RecordType
    key_id: str
    nonce: str
    ciphertext: str

    @property
    def owner(self) -> tuple[str, str]:
        return self.tenant_id, self.user_id

    def associated_data(self) -> bytes:
        """Every clear field but the nonce and ciphertext themselves, unambiguously encoded."""
        bound = [self.v, self.tenant_id, self.user_id, self.event_id, self.session_id, self.ts, self.type, self.key_id]
        return _RECORD_AAD + orjson.dumps(bound)


def new_data_key(tenant_id: str, user_id: str) -> DataKey:
    return DataKey(tenant_id, user_id, uuid.uuid4().hex, AESGCM.generate_key(bit_length=KEY_BYTES * 8))


def seal_plain(key: DataKey, envelope: Envelope, plain: bytes) -> dict[str, str]:
    """`nonce` and `ciphertext` (base64) completing `envelope`, whose clear fields (key_id too) are already set.

    A fresh random nonce per message; the envelope's clear fields are the
    associated data, so none of them can change without the message failing to open.
    """
    if (key.owner, key.key_id) != (envelope.owner, envelope.key_id):
        raise ValueError(f"the data key {key.key_id} of {key.owner} cannot seal for {envelope.owner} {envelope.key_id}")
    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(key.secret).encrypt(nonce, plain, envelope.associated_data())
    return {"nonce": _b64(nonce), "ciphertext": _b64(sealed)}


def open_plain(envelope: Envelope, key: DataKey, what: str) -> bytes:
    """The plaintext; RecordRejected unless `key` is the very key it was sealed with, and nothing changed."""
    if (key.owner, key.key_id) != (envelope.owner, envelope.key_id):
        raise RecordRejected(
            f"{what} of {envelope.owner} key {envelope.key_id} is not for {key.owner} key {key.key_id}"
        )
    try:
        return AESGCM(key.secret).decrypt(
            _unb64(envelope.nonce), _unb64(envelope.ciphertext), envelope.associated_data()
        )
    except (InvalidTag, ValueError) as exc:  # ValueError: a nonce of the wrong length
        raise RecordRejected(f"{what} does not open: {type(exc).__name__}") from None


def seal(key: DataKey, event: TurnEvent | SessionEvent) -> bytes:
    """The archive record of `event`, encrypted with its user's key."""
    if key.owner != (event.tenant_id, event.user_id):
        raise ValueError(f"the data key of {key.owner} cannot seal an event of {(event.tenant_id, event.user_id)}")
    plain = codec.dumps(event)
    header = ArchiveRecord(
        v=FORMAT,
        tenant_id=event.tenant_id,
        user_id=event.user_id,
        event_id=event.event_id,
        session_id=event.session_id,
        ts=orjson.loads(plain)["ts"],  # exactly as the event serializes it, so it compares equal after opening
        type=event.type,
        key_id=key.key_id,
        nonce="",
        ciphertext="",
    )
    return codec.dumps(header.model_copy(update=seal_plain(key, header, plain)))


def read_record(raw: bytes | None) -> ArchiveRecord:
    """The envelope's clear fields, without opening it (no key needed)."""
    if raw is None:
        raise RecordRejected("an empty record")
    try:
        return ArchiveRecord.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise RecordRejected(f"not an archive record: {exc}") from None


def open_record(record: ArchiveRecord, key: DataKey) -> TurnEvent | SessionEvent:
    """The event inside; RecordRejected unless `key` is the very key it was sealed with, and nothing changed."""
    if record.type not in EVENT_TYPES:
        raise RecordRejected(f"record {record.event_id} is a {record.type}, not a chat event")
    plain = open_plain(record, key, f"record {record.event_id}")
    try:
        event = chat_event_adapter.validate_python(orjson.loads(plain))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise RecordRejected(f"record {record.event_id}: the sealed event is not an event: {exc}") from None
    clear = (event.tenant_id, event.user_id, event.event_id, event.session_id, event.type)
    if clear != (record.tenant_id, record.user_id, record.event_id, record.session_id, record.type):
        raise RecordRejected(f"record {record.event_id}: the sealed event does not match its envelope")
    return event


def sealable_bytes(max_message_bytes: int) -> int:
    """The largest command (JSON bytes) whose sealed record still fits in `max_message_bytes` (base64: 4 per 3)."""
    return (max_message_bytes - _ENVELOPE_BYTES) * 3 // 4


def seal_command(key: DataKey, command: AnyCommand) -> bytes:
    """The archive record of an applied command, encrypted with its user's key (never a forget: see `forgotten`)."""
    if key.owner != (command.tenant_id, command.user_id):
        raise ValueError(f"the data key of {key.owner} cannot seal a command of {(command.tenant_id, command.user_id)}")
    if isinstance(command, ForgetUser):
        raise ValueError("a forget is archived in clear (`forgotten`): the user's key goes with it")
    plain = command_adapter.dump_json(command)
    header = ArchiveRecord(
        v=FORMAT,
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        event_id=command.command_id,
        session_id="",
        ts=orjson.loads(plain)["at"],
        type="command",
        key_id=key.key_id,
        nonce="",
        ciphertext="",
    )
    return codec.dumps(header.model_copy(update=seal_plain(key, header, plain)))


def open_command(record: ArchiveRecord, key: DataKey) -> AnyCommand:
    """The command inside a `command` record; RecordRejected as `open_record`."""
    if record.type != "command":
        raise RecordRejected(f"record {record.event_id} is a {record.type}, not a command")
    plain = open_plain(record, key, f"command {record.event_id}")
    try:
        command = command_adapter.validate_json(plain)
    except ValidationError as exc:
        raise RecordRejected(f"command {record.event_id}: the sealed command is not a command: {exc}") from None
    if (command.tenant_id, command.user_id, command.command_id) != (record.tenant_id, record.user_id, record.event_id):
        raise RecordRejected(f"command {record.event_id}: the sealed command does not match its envelope")
    return command


def forgotten(command: ForgetUser) -> bytes:
    """The clear archive record of a forget: ids and time only, as `memory.changes`' `forgotten` is."""
    record = ArchiveRecord(
        v=FORMAT,
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        event_id=command.command_id,
        session_id="",
        ts=command.model_dump(mode="json")["at"],
        type="forgotten",
        key_id="",
        nonce="",
        ciphertext="",
    )
    return codec.dumps(record)


def forget_of(record: ArchiveRecord) -> ForgetUser:
    """The forget a `forgotten` record stands for (it carries no more than that command)."""
    if record.type != "forgotten":
        raise RecordRejected(f"record {record.event_id} is a {record.type}, not a forget")
    try:
        clear = {"command_id": record.event_id, "tenant_id": record.tenant_id, "user_id": record.user_id}
        return ForgetUser.model_validate({**clear, "at": record.ts})
    except ValidationError as exc:
        raise RecordRejected(f"forget {record.event_id}: {exc}") from None


def wrap(master: MasterKey, key: DataKey) -> bytes:
    """nonce ‖ AES-GCM(master, data key), bound to the key's owner and id: a row copied to another user fails."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(master.secret).encrypt(nonce, key.secret, _wrap_aad(key.tenant_id, key.user_id, key.key_id))


def unwrap(master: MasterKey, tenant_id: str, user_id: str, key_id: str, wrapped: bytes) -> DataKey:
    try:
        secret = AESGCM(master.secret).decrypt(
            wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], _wrap_aad(tenant_id, user_id, key_id)
        )
    except InvalidTag:
        raise RecordRejected(f"the wrapped data key {key_id} of {(tenant_id, user_id)} does not open") from None
    return DataKey(tenant_id, user_id, key_id, secret)


def _wrap_aad(tenant_id: str, user_id: str, key_id: str) -> bytes:
    return _WRAP_AAD + orjson.dumps([tenant_id, user_id, key_id])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise RecordRejected(f"bad base64: {exc}") from None
