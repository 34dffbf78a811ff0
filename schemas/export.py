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

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

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


# --- the document as JSON, in pieces ------------------------------------------------

ExportSection = Literal["memories", "vectors", "sessions", "turns", "session_summaries"]


@dataclass(frozen=True)
class ExportPage:
    """Some of one list of the document, in its order; `vectors` items are (memory id, vector) pairs."""

    section: ExportSection
    items: Sequence[Any]


# The lists in the document's field order, each item's serializer, and the brackets around them.
_SECTIONS: tuple[tuple[ExportSection, TypeAdapter[Any], bytes, bytes], ...] = (
    ("memories", TypeAdapter(MemoryRecord), b"[", b"]"),
    ("vectors", TypeAdapter(dict[MemoryId, list[float]]), b"{", b"}"),
    ("sessions", TypeAdapter(ExportedSession), b"[", b"]"),
    ("turns", TypeAdapter(ExportedTurn), b"[", b"]"),
    ("session_summaries", TypeAdapter(ExportedSummary), b"[", b"]"),
)
_EMPTY_LISTS = b"".join(b',"%s":%s%s' % (name.encode(), start, end) for name, _, start, end in _SECTIONS) + b"}"


def _item(adapter: TypeAdapter[Any], section: ExportSection, item: Any) -> bytes:
    if section == "vectors":
        memory_id, vector = item
        return adapter.dump_json({memory_id: vector}, by_alias=True)[1:-1]  # one `"id":[...]` member
    return adapter.dump_json(item, by_alias=True)


async def document_json(head: ExportDocument, pages: AsyncIterable[ExportPage]) -> AsyncIterator[bytes]:
    """`head` (a document whose lists are empty) with `pages`' items in its lists, as JSON, a page at a time.

    Byte for byte what serializing the whole document gives (the
    response_model path of the HTTP route before it streamed): each item
    goes through the same pydantic serializer as inside the document, and
    the fields come in the model's order. Pages must come in that order too.
    """
    whole = head.model_dump_json(by_alias=True).encode()
    if not whole.endswith(_EMPTY_LISTS):
        raise ValueError("the head of a streamed export must have every list empty")
    yield whole[: -len(_EMPTY_LISTS)]
    at = -1  # index in _SECTIONS of the list open now
    written = False  # an item of that list was written (the next needs a comma)
    async for page in pages:
        index = next(i for i, (name, *_) in enumerate(_SECTIONS) if name == page.section)
        if index < at:
            raise ValueError(f"export pages out of the document's order: {page.section} after {_SECTIONS[at][0]}")
        chunk = [_SECTIONS[at][3]] if index > at >= 0 else []
        while at < index:
            at += 1
            name, _, start, end = _SECTIONS[at]
            chunk.append(b',"%s":%s' % (name.encode(), start))
            if at < index:
                chunk.append(end)
            written = False
        adapter = _SECTIONS[at][1]
        for item in page.items:
            chunk.append((b"," if written else b"") + _item(adapter, page.section, item))
            written = True
        yield b"".join(chunk)
    tail = [_SECTIONS[at][3]] if at >= 0 else []
    for name, _, start, end in _SECTIONS[at + 1 :]:
        tail.append(b',"%s":%s%s' % (name.encode(), start, end))
    yield b"".join(tail) + b"}"
