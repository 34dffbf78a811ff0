"""Topic names, in one place for code; `topics.yaml` declares the same set (a test holds them equal).

Attribute = the role a topic plays in the pipeline; value = its Kafka name.
"""

from __future__ import annotations

from typing import Final

TURNS: Final = "chat.turns"
EVICTED: Final = "memory.evicted"
CANDIDATES: Final = "memory.candidates"
EMBEDDED: Final = "memory.embedded"
COMMANDS: Final = "memory.commands"
CHANGES: Final = "memory.changes"
DLQ: Final = "memory.dlq"
ARCHIVE: Final = "memory.archive"

BY_ROLE: Final[dict[str, str]] = {
    "turns": TURNS,
    "evicted": EVICTED,
    "candidates": CANDIDATES,
    "embedded": EMBEDDED,
    "commands": COMMANDS,
    "changes": CHANGES,
    "dlq": DLQ,
    "archive": ARCHIVE,
}
