"""HTTP request and response bodies, and the checked types of path and query parameters.

Every id a client sends (body, path or query) is a `schemas.Identifier`, the
same rule the event contract applies (1-200 characters, no ':', whitespace,
control character or lone surrogate, already NFC), so no NUL or surrogate
reaches a store: Postgres would refuse them with a driver error, which used
to surface as a 503.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic_core import PydanticCustomError

from schemas import Identifier, MemoryRecord, MemoryType
from schemas.memory import MemoryId, MemoryLayer
from schemas.validation import has_surrogate

QUERY_MAX_CHARS = 8_000
MAX_OFFSET = 1_000_000


def _free_text(value: str) -> str:
    """Free text may hold newlines and tabs, but not NUL (a client bug, and no store keeps it) or lone surrogates."""
    if has_surrogate(value):
        raise PydanticCustomError("text_surrogate", "must be valid Unicode (found a lone surrogate)")
    if "\x00" in value:
        raise PydanticCustomError("text_nul", "must not contain NUL (U+0000)")
    return unicodedata.normalize("NFC", value)


QueryText = Annotated[str, StringConstraints(min_length=1, max_length=QUERY_MAX_CHARS), AfterValidator(_free_text)]

# Path and query parameters of the memory routes.
TenantQ = Annotated[Identifier, Query(description="Tenant that owns the memory")]
UserQ = Annotated[Identifier, Query(description="User whose memory it is")]
UserPath = Annotated[Identifier, Path(description="User whose memory it is")]
SessionPath = Annotated[Identifier, Path(description="Session id")]
MemoryIdPath = Annotated[MemoryId, Path(description="Memory id (a UUID)")]
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: Identifier
    user_id: Identifier
    query: QueryText
    # Strict: "5", 5.0 and true are type errors, not quietly a number.
    top_k: int = Field(default=10, ge=1, le=100, strict=True)
    token_budget: int = Field(default=2_000, ge=1, le=64_000, strict=True)
    session_id: Identifier | None = None
    types: list[MemoryType] | None = None
    # Episodes folded into a pattern stay out of recall unless asked for.
    include_compressed: bool = Field(default=False, strict=True)
    # False for evaluations, dashboards and audits: looking at memory must not change it.
    record_access: bool = Field(default=True, strict=True)
    # "memory_block": `<memory>` lines in rank order; "sections": USER PROFILE /
    # PRIOR CONTEXT / RECENT SESSIONS, packed layer by layer.
    format: Literal["memory_block", "sections"] = "memory_block"


class Source(BaseModel):
    session_id: str | None
    event_ids: list[str]
    metadata: list[dict[str, Any]]


class RecalledMemory(BaseModel):
    id: str
    type: str
    text: str
    score: float
    signals: dict[str, float]
    observed_at: datetime
    source: Source
    layer: MemoryLayer
    access_count: int
    last_accessed_at: datetime | None
    # "open_question": a question the user asked earlier that is still open and this recall touches.
    surfaced: str | None = None


class WorkingTurn(BaseModel):
    event_id: str
    turn_index: int
    role: str
    content: str
    ts: datetime


class WorkingWindow(BaseModel):
    session_id: str
    turns: list[WorkingTurn]
    tokens: int
    closed: bool
    layer: Literal[MemoryLayer.WORKING] = MemoryLayer.WORKING


class RecallResponse(BaseModel):
    memories: list[RecalledMemory]
    prompt: str
    tokens_used: int
    working: WorkingWindow | None = None


class MemoryList(BaseModel):
    memories: list[MemoryRecord]


class History(BaseModel):
    memory_id: str
    chain: list[MemoryRecord]
