"""Write the JSON Schema files other languages validate against.

`python -m schemas.generate` rewrites `schemas/json/`; a test fails when the
committed files drift from the models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemas.changes import SealedChange
from schemas.commands import UserForgotten, command_adapter
from schemas.events import SessionEvent, TurnEvent, chat_event_adapter
from schemas.export import ExportDocument
from schemas.memory import EmbeddedCandidate, EvictedChunk, MemoryCandidate, MemoryChange

# `chat_event` is what a `chat.turns` message must match: a turn or a session end.
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "chat_event": lambda: {
        "title": "ChatEvent",
        "description": "A message on chat.turns: a turn (`type` omitted or 'turn') or a session end.",
        **chat_event_adapter.json_schema(),
    },
    "turn_event": TurnEvent.model_json_schema,
    "session_event": SessionEvent.model_json_schema,
    "evicted_chunk": EvictedChunk.model_json_schema,
    "memory_candidate": MemoryCandidate.model_json_schema,
    "embedded_candidate": EmbeddedCandidate.model_json_schema,
    "memory_change": MemoryChange.model_json_schema,
    "sealed_change": SealedChange.model_json_schema,
    "memory_command": lambda: {
        "title": "MemoryCommand",
        "description": "A message on memory.commands; `kind` says which command it is.",
        **command_adapter.json_schema(),
    },
    "user_forgotten": UserForgotten.model_json_schema,
    "export_document": ExportDocument.model_json_schema,
}

JSON_DIR = Path(__file__).parent / "json"


def render() -> dict[str, str]:
    return {
        f"{name}.schema.json": json.dumps(schema(), indent=2, sort_keys=True) + "\n" for name, schema in SCHEMAS.items()
    }


def main() -> None:
    JSON_DIR.mkdir(exist_ok=True)
    for filename, text in render().items():
        (JSON_DIR / filename).write_text(text)


if __name__ == "__main__":
    main()
