"""HTTP request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas import MemoryRecord, MemoryType

Ident = Field(min_length=1, max_length=200)


class RecallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Ident
    user_id: str = Ident
    query: str = Field(min_length=1, max_length=8_000)
    top_k: int = Field(default=10, ge=1, le=100)
    token_budget: int = Field(default=2_000, ge=1, le=64_000)
    session_id: str | None = None
    types: list[MemoryType] | None = None


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
