"""What chat services publish on `chat.turns`.

Turns and session events share the topic (and the `tenant:user` key) so a
consumer sees a session's end after all of its turns.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

SCHEMA_VERSION: Literal[1] = 1

Identifier = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^:\s]+$")]


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: Identifier
    tenant_id: Identifier
    user_id: Identifier
    session_id: Identifier
    ts: AwareDatetime
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> bytes:
        return partition_key(self.tenant_id, self.user_id)


class TurnEvent(_Event):
    """One message of a conversation, as the chat service saw it."""

    type: Literal["turn"] = "turn"
    turn_index: int = Field(ge=0)
    role: Role
    content: str


class SessionEvent(_Event):
    """A conversation closed: the window's remainder gets summarized."""

    type: Literal["session_end"] = "session_end"


def _event_kind(data: Any) -> str:
    """`type` may be omitted: a plain turn is the common case."""
    kind = data.get("type", "turn") if isinstance(data, dict) else getattr(data, "type", "turn")
    return str(kind)


ChatEvent = Annotated[
    Annotated[TurnEvent, Tag("turn")] | Annotated[SessionEvent, Tag("session_end")], Discriminator(_event_kind)
]
chat_event_adapter: TypeAdapter[TurnEvent | SessionEvent] = TypeAdapter(ChatEvent)


def partition_key(tenant_id: str, user_id: str) -> bytes:
    """Every topic is keyed tenant:user, so one consumer owns a user at a time."""
    return f"{tenant_id}:{user_id}".encode()
