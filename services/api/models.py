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
from fastapi.openapi.models import Example
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from schemas import Identifier, MemoryRecord, MemoryType
from schemas.memory import MemoryId, MemoryLayer
from schemas.validation import METADATA_STRING_FORBIDDEN, Timestamp, has_surrogate

QUERY_MAX_CHARS = 8_000
MAX_OFFSET = 1_000_000


def _free_text(value: str) -> str:
    """Free text may hold newlines and tabs, but not NUL (a client bug, and no store keeps it) or lone surrogates."""
    if has_surrogate(value):
        raise PydanticCustomError("text_surrogate", "must be valid Unicode (found a lone surrogate)")
    if "\x00" in value:
        raise PydanticCustomError("text_nul", "must not contain NUL (U+0000)")
    return unicodedata.normalize("NFC", value)


# The document states the rule too (no NUL, no lone surrogate): a generated text with a NUL is not valid.
FreeText = Annotated[
    str, AfterValidator(_free_text), Field(json_schema_extra={"not": {"pattern": METADATA_STRING_FORBIDDEN}})
]
QueryText = Annotated[FreeText, StringConstraints(min_length=1, max_length=QUERY_MAX_CHARS)]


def _example(value: str) -> dict[str, Example]:
    """A parameter-level example: an `Identifier`'s own JSON Schema replaces any `examples` beside it."""
    return {"example": {"value": value}}


# Path and query parameters of the memory routes.
TenantQ = Annotated[
    Identifier,
    Query(description="Tenant that owns the memory (the API key's tenant)", openapi_examples=_example("acme")),
]
UserQ = Annotated[Identifier, Query(description="User whose memory it is", openapi_examples=_example("u-42"))]
UserPath = Annotated[Identifier, Path(description="User whose memory it is", openapi_examples=_example("u-42"))]
SessionPath = Annotated[
    Identifier, Path(description="Session id, as sent on `chat.turns`", openapi_examples=_example("s-7"))
]
MemoryIdPath = Annotated[
    MemoryId, Path(description="Memory id (a UUID)", openapi_examples=_example("0e5c2d6e-7f1a-4c3b-9d2e-5a6b7c8d9e0f"))
]
Limit = Annotated[
    int, Query(ge=1, le=1000, description="Most memories to return (default: the MEMSTREAM_RECALL_TOP_K setting, 10)")
]
Offset = Annotated[
    int, Query(ge=0, le=MAX_OFFSET, description="Memories to skip, in the listing's order (oldest observed first)")
]


class RecallRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"tenant_id": "acme", "user_id": "u-42", "query": "what coffee does the user like?", "top_k": 5}
            ]
        },
    )

    tenant_id: Identifier = Field(description="Tenant that owns the memory (the API key's tenant)")
    user_id: Identifier = Field(description="User whose memory is asked")
    query: QueryText = Field(description="What the assistant is about to answer; matched by meaning and by words")
    # Strict: "5", 5.0 and true are type errors, not quietly a number.
    top_k: int = Field(
        default=10,
        ge=1,
        le=100,
        strict=True,
        description="Most memories to return (default: the MEMSTREAM_RECALL_TOP_K setting, 10)",
    )
    token_budget: int = Field(
        default=2_000,
        ge=1,
        le=64_000,
        strict=True,
        description="Tokens the `prompt` block may take (default: the MEMSTREAM_RECALL_TOKEN_BUDGET setting, 2,000)",
    )
    session_id: Identifier | None = Field(
        default=None, description="The current session: its working window comes back as `working`"
    )
    types: list[MemoryType] | None = Field(default=None, description="Only these memory types (default: all)")
    # Episodes folded into a pattern stay out of recall unless asked for.
    include_compressed: bool = Field(
        default=False, strict=True, description="Also episodes already folded into a pattern"
    )
    # False for evaluations, dashboards and audits: looking at memory must not change it.
    record_access: bool = Field(
        default=True, strict=True, description="Count this recall as an access (false for audits and evaluations)"
    )
    as_of: Timestamp | None = Field(
        default=None,
        description="Answer as memory stood at this time (RFC 3339 with a UTC offset): what was observed later is "
        "left out, what was superseded or merged later is shown as it was then; deleted memories never come back. "
        "A time not in the past answers like no `as_of`.",
        examples=["2025-03-01T12:00:00Z"],
    )
    # "memory_block": `<memory>` lines in rank order; "sections": USER PROFILE /
    # PRIOR CONTEXT / RECENT SESSIONS, packed layer by layer.
    format: Literal["memory_block", "sections"] = Field(
        default="memory_block",
        description="`memory_block`: `<memory>` lines in rank order; "
        "`sections`: USER PROFILE / PRIOR CONTEXT / RECENT SESSIONS, packed layer by layer",
    )


_WHEN = "2025-03-14T09:26:53Z"
_MEMORY_ID = "0e5c2d6e-7f1a-4c3b-9d2e-5a6b7c8d9e0f"


class Source(BaseModel):
    session_id: str | None = Field(description="Session the memory was derived from (none for manual memories)")
    event_ids: list[str] = Field(description="Turns it was derived from, as sent on `chat.turns`")
    metadata: list[dict[str, Any]] = Field(description="The `metadata` of those turns")


class RecalledMemory(BaseModel):
    id: str = Field(description="Memory id (a UUID)")
    type: str = Field(description="fact, preference, episode, exchange, semantic, pattern or question")
    text: str = Field(description="The memory as stored")
    score: float = Field(description="Final rank score, higher is better")
    signals: dict[str, float] = Field(description="The parts of the score: similarity, recency, importance, ...")
    observed_at: datetime = Field(description="When what it says was said")
    source: Source = Field(description="Where it came from")
    layer: MemoryLayer = Field(description="procedural, semantic or episodic")
    access_count: int = Field(description="How often recall returned it")
    last_accessed_at: datetime | None = Field(description="Last time recall returned it")
    surfaced: str | None = Field(
        default=None,
        description="`open_question`: a question the user asked earlier that is still open and this recall touches",
    )


class WorkingTurn(BaseModel):
    event_id: str = Field(description="The turn's event id")
    turn_index: int = Field(description="Position in the session")
    role: str = Field(description="user, assistant, system or tool")
    content: str = Field(description="What was said")
    ts: datetime = Field(description="When")


class WorkingWindow(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "session_id": "s-7",
                    "turns": [
                        {
                            "event_id": "e-1",
                            "turn_index": 0,
                            "role": "user",
                            "content": "I take my coffee black.",
                            "ts": _WHEN,
                        }
                    ],
                    "tokens": 7,
                    "closed": False,
                    "layer": "working",
                }
            ]
        }
    )

    session_id: str = Field(description="The session")
    turns: list[WorkingTurn] = Field(description="The turns still in the window, oldest first")
    tokens: int = Field(description="Tokens the window holds")
    closed: bool = Field(description="True once the session ended (explicitly or idle)")
    layer: Literal[MemoryLayer.WORKING] = MemoryLayer.WORKING


class RecallResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "memories": [
                        {
                            "id": _MEMORY_ID,
                            "type": "preference",
                            "text": "The user takes their coffee black.",
                            "score": 0.81,
                            "signals": {"similarity": 0.74, "recency": 0.9, "importance": 0.7},
                            "observed_at": _WHEN,
                            "source": {"session_id": "s-7", "event_ids": ["e-1"], "metadata": [{}]},
                            "layer": "procedural",
                            "access_count": 3,
                            "last_accessed_at": _WHEN,
                        }
                    ],
                    "prompt": "<memory>\n- The user takes their coffee black.\n</memory>",
                    "tokens_used": 14,
                    "working": None,
                }
            ]
        }
    )

    memories: list[RecalledMemory] = Field(description="Best first")
    prompt: str = Field(description="The memories packed into `token_budget`, ready to put in a system prompt")
    tokens_used: int = Field(description="Tokens `prompt` takes")
    working: WorkingWindow | None = Field(default=None, description="The session's window, when `session_id` was given")


_RECORD: JsonDict = {
    "id": _MEMORY_ID,
    "tenant_id": "acme",
    "user_id": "u-42",
    "type": "fact",
    "text": "The user lives in Lyon.",
    "content_hash": "9f2c4e0b",
    "category": "location",
    "key_name": "home_city",
    "value": "Lyon",
    "importance": 0.8,
    "confidence": 0.9,
    "status": "active",
    "observed_at": _WHEN,
    "created_at": _WHEN,
    "updated_at": _WHEN,
    "source": {"session_id": "s-7", "event_ids": ["e-3"], "metadata": []},
    "entities": ["Lyon"],
}


class MemoryList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"memories": [_RECORD]}]})

    memories: list[MemoryRecord] = Field(description="Oldest observed first")


class History(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "memory_id": _MEMORY_ID,
                    "chain": [
                        {
                            **_RECORD,
                            "id": "5b0a3f1e-2c4d-4e6f-8a9b-0c1d2e3f4a5b",
                            "text": "The user lives in Paris.",
                            "value": "Paris",
                            "status": "superseded",
                            "superseded_at": _WHEN,
                            "superseded_by": _MEMORY_ID,
                        },
                        _RECORD,
                    ],
                }
            ]
        }
    )

    memory_id: str = Field(description="The memory asked about")
    chain: list[MemoryRecord] = Field(description="Every version linked to it by supersession or merge, oldest first")


class ReplicaLag(BaseModel):
    lag: int = Field(description="Messages of memory.changes the replica had yet to apply when it last reported")
    report_age_seconds: float = Field(description="Seconds since it last reported")


class ReplicaStatus(BaseModel):
    name: str = Field(description="The replica that answered (also in the `x-memstream-replica` header)")
    lag: int | None = Field(description="Messages of memory.changes its own index has yet to apply")
    caught_up: bool = Field(description="Its index has caught up with the log once (it serves only then)")
    replicas: dict[str, ReplicaLag] = Field(description="Every replica of this generation, as each last reported")


class ReadyStatus(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"ready": True, "checks": {"kafka": True, "postgres": True, "qdrant": True}}]}
    )

    ready: bool = Field(description="True when every check passed")
    checks: dict[str, bool] = Field(description="Each dependency and whether it answered in time")
    generation: str = Field(default="default", description="The generation of memory this read service answers from")
    rebuilding: dict[str, int | None] = Field(
        default_factory=dict, description="Generations being rebuilt, with the messages each has yet to process"
    )
    replica: ReplicaStatus | None = Field(
        default=None, description="On a read replica (`memstream serve --replicas N`): its index's lag, and the others'"
    )


class Health(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: Literal["ok"] = Field(description="Always `ok`: the process answers")


_KEY_ID = "3f9c0a1b2c3d4e5f"
_KEY_INFO: JsonDict = {
    "id": _KEY_ID,
    "tenant_id": "acme",
    "role": "read",
    "name": "support console",
    "hint": "ms_AbC123",
    "created_at": _WHEN,
    "last_used_at": None,
    "revoked_at": None,
}
TenantOptQ = Annotated[
    Identifier | None,
    Query(
        description="The tenant (default: the API key's; an operator key must name one)",
        openapi_examples=_example("acme"),
    ),
]
KeyIdPath = Annotated[Identifier, Path(description="Key id (from the key listing)", openapi_examples=_example(_KEY_ID))]


class UserSummary(BaseModel):
    user_id: str = Field(description="User id")
    total: int = Field(description="Memories the user holds, every status")
    by_type: dict[str, int] = Field(description="Memories by type")
    by_status: dict[str, int] = Field(description="Memories by status")


class UserList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "tenant_id": "acme",
                    "users": [
                        {
                            "user_id": "u-42",
                            "total": 3,
                            "by_type": {"fact": 2, "preference": 1},
                            "by_status": {"active": 2, "superseded": 1},
                        }
                    ],
                }
            ]
        }
    )

    tenant_id: str = Field(description="The tenant listed")
    users: list[UserSummary] = Field(description="Users holding any memory, by id")


class SourceTurn(BaseModel):
    event_id: str = Field(description="The turn's id, as sent on `chat.turns`")
    session_id: str = Field(description="Session of the turn")
    role: str = Field(description="user or assistant")
    text: str = Field(description="What the turn said, as archived")
    ts: datetime = Field(description="When it was said")


class MemoryDetail(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "memory": _RECORD,
                    "layer": "semantic",
                    "sources": [
                        {"event_id": "e-3", "session_id": "s-7", "role": "user", "text": "I moved to Lyon", "ts": _WHEN}
                    ],
                }
            ]
        }
    )

    memory: MemoryRecord = Field(description="The memory as stored")
    layer: MemoryLayer = Field(description="procedural, semantic or episodic")
    sources: list[SourceTurn] = Field(
        description="The archived turns its provenance names, in turn order (none for a manual memory, or once "
        "the turns have left the archive)"
    )


class KeyInfo(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_KEY_INFO]})

    id: str = Field(description="Key id (what revoking takes)")
    tenant_id: str | None = Field(description="The key's tenant; none for an operator key")
    role: str = Field(description="read, write or admin")
    name: str = Field(description="A label")
    hint: str = Field(description="The key's first characters, to tell keys apart")
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class KeyList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"keys": [_KEY_INFO]}]})

    keys: list[KeyInfo] = Field(description="Oldest first, revoked keys included")


class NewKeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"role": "read", "name": "support"}]})

    role: Literal["read", "write", "admin"] = Field(description="The new key's role")
    name: Annotated[FreeText, StringConstraints(max_length=200)] = Field(default="", description="A label")


class NewKey(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"key": "ms_AbC123dEf456gHi789jKl012mNo345pQr678sTu901v", "record": _KEY_INFO}]}
    )

    key: str = Field(description="The key itself: shown once, kept nowhere")
    record: KeyInfo


class StageLag(BaseModel):
    stage: str = Field(description="The consumer group's stage")
    topic: str = Field(description="The topic it consumes")
    lag: int | None = Field(description="Messages not yet committed; none when the broker did not answer")


class LagReport(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"stages": [{"stage": "window", "topic": "memory.archive", "lag": 0}]}]}
    )

    stages: list[StageLag]


class DeadLetterEntry(BaseModel):
    partition: int
    offset: int
    reason: str = Field(description="Why it was dead-lettered")
    state: str = Field(description="clear, opened (sealed for its user), forgotten (key gone) or unreadable")
    headers: dict[str, str] = Field(description="The entry's headers (source topic, stage, error), as text")
    original_base64: str | None = Field(description="The original message's bytes, base64")
    preview: str = Field(description="The original bytes as printable text (non-printables escaped), cut short")


class DeadLetterList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "entries": [
                        {
                            "partition": 0,
                            "offset": 12,
                            "reason": "invalid_event",
                            "state": "clear",
                            "headers": {"reason": "invalid_event", "source-topic": "chat.turns"},
                            "original_base64": "bm90IGpzb24=",
                            "preview": "not json",
                        }
                    ],
                    "complete": True,
                }
            ]
        }
    )

    entries: list[DeadLetterEntry] = Field(description="The newest entries, oldest first")
    complete: bool = Field(
        True,
        description="False when the broker did not return every partition's newest entries before the deadline "
        "(MEMSTREAM_HTTP_OPS_TIMEOUT): the list lacks some; ask again",
    )
