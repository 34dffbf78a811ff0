"""Memory candidates, records and the public `memory.changes` contract."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from schemas.events import TurnEvent, partition_key
from schemas.validation import Identifier

SCHEMA_VERSION: Literal[1] = 1

# Memory ids are UUIDs (deterministic uuid5 in our stages): Qdrant accepts
# nothing else as a point id, so a bad one must fail validation, not indexing.
MemoryId = Annotated[
    str, Field(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
]


class MemoryType(StrEnum):
    FACT = "fact"  # keyed profile fact: category/key/value, superseded by a new value
    PREFERENCE = "preference"
    EPISODE = "episode"  # summary of a stretch of conversation
    EXCHANGE = "exchange"  # a raw user turn, so what was said stays findable


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    DELETED = "deleted"


class ChangeOp(StrEnum):
    ADDED = "added"
    UPDATED = "updated"
    SUPERSEDED = "superseded"
    MERGED = "merged"
    DELETED = "deleted"


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: Identifier
    event_ids: list[str]
    metadata: list[dict[str, Any]] = Field(default_factory=list)


class _Keyed(BaseModel):
    model_config = ConfigDict(frozen=True)
    tenant_id: Identifier
    user_id: Identifier

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


class EvictedChunk(_Keyed):
    """Turns that left a working window, in order; `reason` says why."""

    schema_version: Literal[1] = SCHEMA_VERSION
    session_id: Identifier
    reason: Literal["trimmed", "session_end"]
    turns: list[TurnEvent]
    cause: list[str]


class MemoryCandidate(_Keyed):
    """An unembedded proposal for long-term memory; the consolidator decides."""

    schema_version: Literal[1] = SCHEMA_VERSION
    candidate_id: MemoryId
    type: MemoryType
    text: str
    category: str | None = None
    key_name: str | None = None
    value: str | None = None
    importance: float = Field(ge=0.0, le=1.0)
    confidence: float = Field(ge=0.0, le=1.0)
    observed_at: AwareDatetime
    entities: list[str] = Field(default_factory=list)
    source: Provenance
    extractor: str


class EmbeddedCandidate(_Keyed):
    schema_version: Literal[1] = SCHEMA_VERSION
    candidate: MemoryCandidate
    vector: list[float]
    model: str


class MemoryRecord(BaseModel):
    """The full state of one memory row, as Postgres holds it."""

    model_config = ConfigDict(frozen=True)

    id: MemoryId
    tenant_id: Identifier
    user_id: Identifier
    type: MemoryType
    text: str
    content_hash: str
    category: str | None = None
    key_name: str | None = None
    value: str | None = None
    importance: float
    confidence: float
    status: MemoryStatus
    observed_at: AwareDatetime
    created_at: AwareDatetime
    updated_at: AwareDatetime
    superseded_at: datetime | None = None
    superseded_by: str | None = None
    source: Provenance
    entities: list[str] = Field(default_factory=list)
    access_count: int = 0
    reinforcement_count: int = 0
    version: int = 1


class MemoryChange(_Keyed):
    """Published after every committed change, with the whole record.

    `version` grows by one per change to a record, so subscribers can drop the
    duplicates that at-least-once delivery may hand them.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    op: ChangeOp
    record: MemoryRecord
    vector: list[float] | None = None
    cause: list[str]
    committed_at: AwareDatetime
    turn_ts: AwareDatetime | None = None
