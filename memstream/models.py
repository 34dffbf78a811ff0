"""What the read service answers, as the client returns it.

The client's own models rather than the server's (services.api.models): a
client must not pull the server in. They are lenient on purpose: unknown
fields are kept (`model_extra`) and not rejected, so a newer server does not
break an older client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class Source(_Answer):
    session_id: str | None = None
    event_ids: list[str] = Field(default_factory=list)
    metadata: list[dict[str, Any]] = Field(default_factory=list)


class RecalledMemory(_Answer):
    id: str
    type: str
    text: str
    score: float
    signals: dict[str, float] = Field(default_factory=dict)
    observed_at: datetime
    source: Source
    layer: str
    access_count: int = 0
    last_accessed_at: datetime | None = None


class WorkingTurn(_Answer):
    event_id: str
    turn_index: int
    role: str
    content: str
    ts: datetime


class WorkingWindow(_Answer):
    session_id: str
    turns: list[WorkingTurn]
    tokens: int
    closed: bool


class RecallResult(_Answer):
    memories: list[RecalledMemory]
    prompt: str
    tokens_used: int
    working: WorkingWindow | None = None


class Memory(_Answer):
    """A stored memory; `source` is its provenance (sessions, event ids, how it was made)."""

    id: str
    tenant_id: str
    user_id: str
    type: str
    text: str
    status: str
    category: str | None = None
    key_name: str | None = None
    value: str | None = None
    importance: float = 0.0
    confidence: float = 0.0
    observed_at: datetime
    created_at: datetime
    updated_at: datetime
    superseded_at: datetime | None = None
    superseded_by: str | None = None
    source: dict[str, Any] = Field(default_factory=dict)
    entities: list[str] = Field(default_factory=list)
    version: int = 1
    access_count: int = 0


class MemoryHistory(_Answer):
    memory_id: str
    chain: list[Memory]


class AppliedChange(_Answer):
    id: str
    op: str
    status: str
    version: int


class CommandReceipt(_Answer):
    """`status` accepted: the broker has the command; applied (`wait=True`): it shows in Postgres and the index."""

    command_id: str
    kind: str
    status: Literal["accepted", "applied"]
    memory_id: str | None = None
    parts: int | None = None
    changes: list[AppliedChange] | None = None


class TurnsAccepted(_Answer):
    accepted: int


class Readiness(_Answer):
    """`/readyz`: `ready` is False (not an exception) when a dependency does not answer."""

    ready: bool
    checks: dict[str, bool] = Field(default_factory=dict)
    generation: str = "default"


class UserSummary(_Answer):
    user_id: str
    total: int
    by_type: dict[str, int] = Field(default_factory=dict)
    by_status: dict[str, int] = Field(default_factory=dict)


class UserList(_Answer):
    tenant_id: str
    users: list[UserSummary]


class SourceTurn(_Answer):
    """A turn a memory was derived from, as archived."""

    event_id: str
    session_id: str
    role: str
    text: str
    ts: datetime


class MemoryDetail(_Answer):
    memory: Memory
    layer: str
    sources: list[SourceTurn] = Field(default_factory=list)


class KeyInfo(_Answer):
    """An API key's record (never the key itself)."""

    id: str
    tenant_id: str | None
    role: str
    name: str
    hint: str
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class NewKey(_Answer):
    """`key` is shown this once: the server keeps only a hash of it."""

    key: str
    record: KeyInfo


class StageLag(_Answer):
    stage: str
    topic: str
    lag: int | None = None  # None: the broker did not answer in time


class DeadLetter(_Answer):
    """A dead-lettered message: why, its headers, and its original bytes (base64) when they can be opened."""

    partition: int
    offset: int
    reason: str
    headers: dict[str, str] = Field(default_factory=dict)
    original_base64: str | None = None
    preview: str = ""
