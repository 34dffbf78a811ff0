"""What chat services publish on `chat.turns`.

Turns and session events share the topic (and the `tenant:user` key) so a
consumer sees a session's end after all of its turns.

The models are strict (no "5" for 5, no epoch number for a time): a producer
learns about a mistake at once instead of finding it coerced in memory. The
rules themselves live in `schemas.validation`, beside the JSON Schema they
generate.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Strict, Tag, TypeAdapter

from schemas.validation import (
    INTEGER_LITERAL_NOTE,
    Content,
    Identifier,
    Metadata,
    Timestamp,
    TurnIndex,
    fail,
    require_int,
)

SCHEMA_VERSION: Literal[1] = 1


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


def _role_name(value: object) -> object:
    """Lax enum validation would take b"user" too; JSON only has strings."""
    if not isinstance(value, str):
        fail("enum_type", f"must be a string, not {type(value).__name__}")
    return value


RoleName = Annotated[Role, Strict(False), BeforeValidator(_role_name)]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    schema_version: Annotated[
        Literal[1], BeforeValidator(require_int), Field(json_schema_extra=INTEGER_LITERAL_NOTE)
    ] = SCHEMA_VERSION
    event_id: Identifier
    tenant_id: Identifier
    user_id: Identifier
    session_id: Identifier
    ts: Timestamp
    metadata: Metadata = Field(default_factory=dict)

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


class TurnEvent(_Event):
    """One message of a conversation, as the chat service saw it."""

    type: Literal["turn"] = "turn"
    turn_index: TurnIndex
    role: RoleName
    content: Content


def _type_required(schema: dict[str, Any]) -> None:
    """On the wire a session end must say so: an event without `type` is a turn (see `_event_kind`)."""
    schema.setdefault("required", []).append("type")
    schema["properties"]["type"].pop("default", None)


class SessionEvent(_Event):
    """A conversation closed: the window's remainder gets summarized."""

    model_config = ConfigDict(json_schema_extra=_type_required)

    type: Literal["session_end"] = "session_end"


def _event_kind(data: Any) -> str:
    """`type` may be omitted: a plain turn is the common case."""
    kind = data.get("type", "turn") if isinstance(data, dict) else getattr(data, "type", "turn")
    return str(kind)


ChatEvent = Annotated[
    Annotated[TurnEvent, Tag("turn")] | Annotated[SessionEvent, Tag("session_end")],
    Discriminator(
        _event_kind,
        custom_error_type="event_type",
        custom_error_message="type must be 'turn' (the default) or 'session_end'",
    ),
]
chat_event_adapter: TypeAdapter[TurnEvent | SessionEvent] = TypeAdapter(ChatEvent)


def partition_key(tenant_id: str, user_id: str) -> bytes:
    """Every topic is keyed tenant:user, so one consumer owns a user at a time."""
    return f"{tenant_id}:{user_id}".encode()
