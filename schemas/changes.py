"""What travels on `memory.changes` (schema version 2): a record's change sealed per user, or a forgotten user.

The topic keeps its messages forever, and it is what subscribers, the recall
index and `rebuild store` read. A change carries a whole memory record (its
text, entities, vector), so it is sealed with the user's archive data key
(services/archive): forgetting the user deletes the key and every change of
theirs on the log becomes unreadable, as their archived turns do.

In clear is only what a subscriber needs to route and de-duplicate without
keys: tenant and user (also the Kafka key), `op`, the memory's id, version,
type and status, `committed_at`, `cause` (command and candidate ids) and the
key id. Everything else — text, keyed fields, entities, provenance, vector,
`reason` — is inside `ciphertext`: the MemoryChange (schemas/memory.py) as it
was published before sealing, AES-256-GCM with every clear field as
associated data (`associated_data()`), so an envelope edited, or moved to
another user, record or key, does not open.

`UserForgotten` stays in clear: it holds ids and row counts, no memory.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from schemas.commands import UserForgotten
from schemas.events import partition_key
from schemas.memory import ChangeOp, Int32, MemoryId, MemoryStatus, MemoryType
from schemas.validation import Identifier

SEALED_SCHEMA_VERSION: Literal[2] = 2
_CHANGE_AAD = b"memstream.changes.v2"


class SealedChange(BaseModel):
    """One change of one memory, sealed with its user's data key; `nonce` and `ciphertext` are base64."""

    # Strict: a clear field is associated data, so no value may be coerced into another that binds the same.
    # Enums are read from their JSON strings (that is what a strict model would refuse from a parsed dict).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    schema_version: Literal[2] = Field(description="2: the sealed envelope (1 was the MemoryChange in clear)")
    tenant_id: Identifier
    user_id: Identifier
    op: ChangeOp = Field(strict=False)
    memory_id: MemoryId = Field(description="The record's id (`record.id` inside)")
    version: int = Field(ge=1, le=Int32, description="The record's version: subscribers drop repeats by it")
    type: MemoryType = Field(strict=False, description="The record's memory type")
    status: MemoryStatus = Field(strict=False, description="The record's status after the change")
    committed_at: str = Field(
        json_schema_extra={"format": "date-time"}, description="As the sealed change serializes it"
    )
    cause: list[str] = Field(description="Command, candidate or maintenance ids that caused the change")
    key_id: str = Field(description="Which of the user's data keys sealed it (user_keys.key_id)")
    nonce: str = Field(description="base64 of the 12-byte AES-GCM nonce")
    ciphertext: str = Field(description="base64 of AES-256-GCM(the MemoryChange's JSON), tag included")

    @property
    def owner(self) -> tuple[str, str]:
        return self.tenant_id, self.user_id

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)

    def associated_data(self) -> bytes:
        """Every clear field but the nonce and ciphertext themselves, unambiguously encoded (a JSON array)."""
        bound = [
            self.schema_version,
            self.tenant_id,
            self.user_id,
            self.op.value,
            self.memory_id,
            self.version,
            self.type.value,
            self.status.value,
            self.committed_at,
            self.cause,
            self.key_id,
        ]
        return _CHANGE_AAD + orjson.dumps(bound)


class SealedChangeMessage(RootModel[SealedChange | UserForgotten]):
    """A `memory.changes` message as it travels: a sealed change, or a forgotten user in clear."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _by_op(cls, data: Any, handler: Any) -> Any:
        """Dispatch on `op`, so a bad envelope reports the SealedChange errors, not both models'."""
        if isinstance(data, dict) and data.get("op") == "forgotten":
            return cls(root=UserForgotten.model_validate(data))
        if isinstance(data, dict):
            return cls(root=SealedChange.model_validate(data))
        return handler(data)
