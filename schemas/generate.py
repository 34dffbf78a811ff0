"""Write the JSON Schema files other languages validate against.

`python -m schemas.generate` rewrites `schemas/json/`; a test fails when the
committed files drift from the models.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas.events import SessionEvent, TurnEvent
from schemas.memory import EmbeddedCandidate, EvictedChunk, MemoryCandidate, MemoryChange

MODELS: dict[str, type[BaseModel]] = {
    "turn_event": TurnEvent,
    "session_event": SessionEvent,
    "evicted_chunk": EvictedChunk,
    "memory_candidate": MemoryCandidate,
    "embedded_candidate": EmbeddedCandidate,
    "memory_change": MemoryChange,
}

JSON_DIR = Path(__file__).parent / "json"


def render() -> dict[str, str]:
    return {
        f"{name}.schema.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
        for name, model in MODELS.items()
    }


def main() -> None:
    JSON_DIR.mkdir(exist_ok=True)
    for filename, text in render().items():
        (JSON_DIR / filename).write_text(text)


if __name__ == "__main__":
    main()
