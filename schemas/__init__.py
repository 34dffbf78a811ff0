"""Event and record contracts shared by every stage and by outside producers."""

from schemas.codec import dumps, loads
from schemas.events import ChatEvent, Role, SessionEvent, TurnEvent, chat_event_adapter, partition_key
from schemas.memory import (
    ChangeOp,
    EmbeddedCandidate,
    EvictedChunk,
    MemoryCandidate,
    MemoryChange,
    MemoryRecord,
    MemoryStatus,
    MemoryType,
    Provenance,
)
from schemas.validation import Identifier

__all__ = [
    "ChangeOp",
    "ChatEvent",
    "EmbeddedCandidate",
    "EvictedChunk",
    "Identifier",
    "MemoryCandidate",
    "MemoryChange",
    "MemoryRecord",
    "MemoryStatus",
    "MemoryType",
    "Provenance",
    "Role",
    "SessionEvent",
    "TurnEvent",
    "chat_event_adapter",
    "dumps",
    "loads",
    "partition_key",
]
