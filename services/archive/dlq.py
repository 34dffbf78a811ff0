"""`memory.dlq` entries sealed per user, so forgetting reaches the DLQ too.

A dead-lettered message whose owner can be read — its value is JSON naming
`tenant_id` and `user_id`, or its Kafka key is `tenant:user` and that user
has a data key — travels sealed with the user's archive data key, sealed
the way the archive and `memory.changes` are (`codec.seal_plain`):

    {"v": 1, "sealed": "dlq", "tenant_id", "user_id", "key_id", "nonce", "ciphertext"}

The ciphertext is the original bytes; tenant, user and key id are bound as
associated data. Forgetting the user deletes the key, so their entries stay
on the topic (30 days) and nobody can open them. Bytes that name nobody (not
JSON, no ids, a key of no known user) stay in clear: there is no key to seal
them with, and they expire with the topic's retention.

Pure apart from `seal_for` and `open_entries`, which ask the key store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from schemas import codec
from schemas.validation import check_identifier
from services.archive.codec import DataKey, RecordRejected, open_plain, seal_plain
from services.archive.keys import KeyStore, Owner

_AAD = b"memstream.dlq.v1"
SEALED_HEADER = "x-memstream-sealed"
TENANT_HEADER = "x-memstream-tenant"
USER_HEADER = "x-memstream-user"
# What a reader shows for an entry, besides the original bytes.
CLEAR, OPENED, FORGOTTEN, UNREADABLE = "clear", "opened", "forgotten", "unreadable"


class SealedDeadLetter(BaseModel):
    """The value of a sealed DLQ entry; `nonce` and `ciphertext` are base64."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[1]
    sealed: Literal["dlq"]
    tenant_id: str
    user_id: str
    key_id: str
    nonce: str
    ciphertext: str

    @property
    def owner(self) -> Owner:
        return self.tenant_id, self.user_id

    def associated_data(self) -> bytes:
        return _AAD + orjson.dumps([self.v, self.tenant_id, self.user_id, self.key_id])


def named_owner(value: bytes | None) -> Owner | None:
    """The tenant and user a value names itself: a JSON object with string `tenant_id` and `user_id`."""
    if not value:
        return None
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    tenant, user = data.get("tenant_id"), data.get("user_id")
    if isinstance(tenant, str) and isinstance(user, str):
        return _valid((tenant, user))
    return None


def keyed_owner(key: bytes | None) -> Owner | None:
    """The tenant and user of a `tenant:user` Kafka key (ids never hold ':')."""
    if not key:
        return None
    try:
        tenant, sep, user = key.decode().partition(":")
    except UnicodeDecodeError:
        return None
    return _valid((tenant, user)) if sep else None


def _valid(owner: Owner) -> Owner | None:
    """The owner when both are ids the pipeline accepts: hostile ids (NUL, separators) never reach the key store."""
    try:
        for part in owner:
            check_identifier(part)
    except PydanticCustomError:
        return None
    return owner


def seal(key: DataKey, value: bytes) -> bytes:
    """`value` sealed with its owner's data key."""
    tenant, user = key.owner
    envelope = SealedDeadLetter(
        v=1, sealed="dlq", tenant_id=tenant, user_id=user, key_id=key.key_id, nonce="", ciphertext=""
    )
    return codec.dumps(envelope.model_copy(update=seal_plain(key, envelope, value)))


def read_sealed(value: bytes | None, headers: Mapping[str, bytes]) -> SealedDeadLetter | None:
    """The envelope of a sealed entry (told by its header), or None for an entry in clear."""
    if headers.get(SEALED_HEADER) != b"1" or value is None:
        return None
    try:
        return SealedDeadLetter.model_validate(orjson.loads(value))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise RecordRejected(f"not a sealed DLQ entry: {exc}") from None


@dataclass(frozen=True)
class Entry:
    """A DLQ entry as an operator reads it: `state` says whether `value` is the original (clear, opened) or not."""

    state: str
    value: bytes | None
    owner: Owner | None = None


def open_with(keys: Mapping[Owner, DataKey], value: bytes | None, headers: Mapping[str, bytes]) -> Entry:
    """One entry opened with the keys at hand: the original bytes, or why not (`forgotten`: the key is gone)."""
    try:
        envelope = read_sealed(value, headers)
    except RecordRejected:
        return Entry(UNREADABLE, None)
    if envelope is None:
        return Entry(CLEAR, value)
    key = keys.get(envelope.owner)
    if key is None or key.key_id != envelope.key_id:
        return Entry(FORGOTTEN, None, envelope.owner)
    try:
        return Entry(OPENED, open_plain(envelope, key, "DLQ entry"), envelope.owner)
    except RecordRejected:
        return Entry(UNREADABLE, None, envelope.owner)


async def open_entries(keys: KeyStore, entries: Sequence[tuple[bytes | None, Mapping[str, bytes]]]) -> list[Entry]:
    """A batch of (value, headers) opened with one key lookup."""
    owners: set[Owner] = set()
    for value, headers in entries:
        try:
            envelope = read_sealed(value, headers)
        except RecordRejected:
            continue
        if envelope is not None:
            owners.add(envelope.owner)
    held = await keys.current(owners)
    return [open_with(held, value, headers) for value, headers in entries]


async def seal_for(keys: KeyStore, key: bytes | None, value: bytes | None) -> tuple[bytes | None, dict[str, bytes]]:
    """The value to dead-letter and the headers that say whose it is.

    A value that names its user is sealed with their key (created if they
    have none: they are a user of the pipeline now); one known only by its
    Kafka key is sealed when that user already has a key. Anything else
    stays as it was, in clear.
    """
    if value is None:
        return value, {}
    named = named_owner(value)
    data_key: DataKey | None
    if named is not None:
        data_key = await keys.get_or_create(*named)
    else:
        owner = keyed_owner(key)
        data_key = None if owner is None else (await keys.current([owner])).get(owner)
    if data_key is None:
        return value, {}
    tenant, user = data_key.owner
    headers = {SEALED_HEADER: b"1", TENANT_HEADER: tenant.encode(), USER_HEADER: user.encode()}
    return seal(data_key, value), headers
