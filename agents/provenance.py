"""How much provenance one memory keeps: the newest sources, within a byte budget.

A memory.changes message carries a record's provenance whole, so merges,
reinforcements and synthesized memories (patterns, topics) all bound it the
same way, far below the broker's message limit.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_SOURCES = 50
MAX_METADATA_BYTES = 64 * 1024


def recent_metadata(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest entries (at most MAX_SOURCES) whose JSON fits in MAX_METADATA_BYTES."""
    kept: list[dict[str, Any]] = []
    size = 0
    for entry in reversed(entries[-MAX_SOURCES:]):
        size += len(orjson.dumps(entry))
        if size > MAX_METADATA_BYTES:
            break
        kept.append(entry)
    return kept[::-1]
