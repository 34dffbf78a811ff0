"""`memstream.export/v1`: everything memstream holds on one user, as one JSON document.

A versioned public format, its own contract: it names what it holds
explicitly (raw turns, sessions with their working windows, the LLM path's
session summaries, and every memory in every status, so history and
provenance travel with it), and any change to its meaning is a new version.

Memory ids: the document shows each memory under the id it had when first
exported. An imported memory never takes that id (ids are global: the recall
index needs unique point ids, and a document may name another tenant's); it
gets one derived from it under the importing user's key and remembers the
document's, so export → import → export gives back the same document, modulo
the tenant and user and `exported_at`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from schemas.events import TurnEvent
from schemas.memory import Int32, MemoryId, MemoryRecord
from schemas.validation import Identifier, Timestamp

EXPORT_FORMAT: Literal["memstream.export/v1"] = "memstream.export/v1"


class ExportedTurn(TurnEvent):
    """A raw turn as archived, with when the archive took it."""

    archived_at: Timestamp


class ExportedSession(BaseModel):
    """A conversation's state: its working window and whether it was closed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: Identifier
    window_turns: list[TurnEvent]
    window_tokens: int = Field(ge=0, le=Int32)
    turn_count: int = Field(ge=0, le=Int32)
    last_turn_at: AwareDatetime | None = None
    closed_at: AwareDatetime | None = None
    end_event_id: str | None = None
    updated_at: AwareDatetime


class ExportedSummary(BaseModel):
    """The rolling per-session summary the LLM extraction path keeps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: Identifier
    summary: str
    previous_summary: str
    chunk_id: str
    through_turn_index: int = Field(ge=0, le=Int32)
    through_event_id: str
    updated_at: AwareDatetime


_WHEN = "2025-03-14T09:26:53Z"
_TURN = {
    "event_id": "e-1",
    "tenant_id": "acme",
    "user_id": "u-42",
    "session_id": "s-7",
    "turn_index": 0,
    "role": "user",
    "content": "I take my coffee black.",
    "ts": _WHEN,
}
EXAMPLE: dict[str, Any] = {
    "format": "memstream.export/v1",
    "exported_at": "2025-03-15T08:00:00Z",
    "tenant_id": "acme",
    "user_id": "u-42",
    "embedding_model": None,
    "memories": [
        {
            "id": "0e5c2d6e-7f1a-4c3b-9d2e-5a6b7c8d9e0f",
            "tenant_id": "acme",
            "user_id": "u-42",
            "type": "preference",
            "text": "User preference: I take my coffee black.",
            "content_hash": "5f0e6a3c0b1d2e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f",
            "importance": 0.7,
            "confidence": 0.9,
            "status": "active",
            "observed_at": _WHEN,
            "created_at": _WHEN,
            "updated_at": _WHEN,
            "source": {"session_id": "s-7", "event_ids": ["e-1"], "metadata": []},
            "entities": [],
            "version": 1,
        }
    ],
    "vectors": {},
    "sessions": [
        {
            "session_id": "s-7",
            "window_turns": [_TURN],
            "window_tokens": 6,
            "turn_count": 1,
            "last_turn_at": _WHEN,
            "updated_at": _WHEN,
        }
    ],
    "turns": [{**_TURN, "archived_at": _WHEN}],
    "session_summaries": [],
}


class ExportDocument(BaseModel):
    """One user's data. Lists are in a fixed order, so two exports of the same state are byte-equal."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={
            "description": "memstream.export/v1: everything memstream holds on one user.",
            "examples": [EXAMPLE],
        },
    )

    format: Literal["memstream.export/v1"] = EXPORT_FORMAT
    exported_at: AwareDatetime
    tenant_id: Identifier
    user_id: Identifier
    # Set when `vectors` is filled: the model that made them (an import with another model re-embeds).
    embedding_model: str | None = None
    # Every memory in every status, oldest observation first: history is the superseded/merged/deleted rows.
    memories: list[MemoryRecord] = Field(default_factory=list)
    # Memory id → embedding, only when asked for (`?vectors=true`).
    vectors: dict[MemoryId, list[float]] = Field(
        default_factory=dict,
        json_schema_extra={"additionalProperties": False},  # keys are memory ids only
    )
    sessions: list[ExportedSession] = Field(default_factory=list)
    turns: list[ExportedTurn] = Field(default_factory=list)
    session_summaries: list[ExportedSummary] = Field(default_factory=list)
