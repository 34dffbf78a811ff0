"""The memory model page, written from the enums in schemas/memory.py.

The kinds, layers and states of a memory are defined there, each with a
one-line comment; the page tabulates them so it says what the contract says.
"""

from __future__ import annotations

import inspect
import re
from enum import StrEnum

from schemas import memory

# `FACT = "fact"  # keyed profile fact ...` → ("fact", "keyed profile fact ...")
_MEMBER = re.compile(r'^\s+[A-Z_]+ = "([a-z_]+)"(?:\s*#\s*(.*))?$')


def _comments(enum: type[StrEnum]) -> dict[str, str]:
    """Each member's value and the comment on its line."""
    found: dict[str, str] = {}
    for line in inspect.getsource(enum).splitlines():
        m = _MEMBER.match(line)
        if m:
            found[m.group(1)] = m.group(2) or "—"
    return found


def render_memory_model() -> str:
    """Types with their layer, the layers, and the states a memory moves through."""
    types = _comments(memory.MemoryType)
    layers = _comments(memory.MemoryLayer)
    states = _comments(memory.MemoryStatus)
    out = [
        "# The memory model",
        "",
        "Generated at build time from `schemas/memory.py`, the contract every stage and the read service share. "
        "A memory belongs to one tenant and one user, has a type, and with it a layer that recall presents it "
        "under; it carries its provenance (the session and the turns it came from, with their metadata), an "
        "importance, when it was observed and how often recall returned it. A correction or a new value of a keyed "
        "fact is a new memory that supersedes the old one; every change is published on `memory.changes`.",
        "",
        "## Types",
        "",
        "| type | layer | what it holds |",
        "|---|---|---|",
    ]
    for t in memory.MemoryType:
        out.append(f"| `{t.value}` | `{memory.LAYER_OF_TYPE[t].value}` | {types.get(t.value, '')} |")
    out += ["", "## Layers", "", "| layer | what it answers |", "|---|---|"]
    out += [f"| `{layer.value}` | {layers.get(layer.value, '')} |" for layer in memory.MemoryLayer]
    out += [
        "",
        "## States",
        "",
        "Recall returns `active` memories (point-in-time recall: those active at the time asked); the others "
        "stay in the store, so a memory's history (`GET /v1/users/{user_id}/memories/{memory_id}/history`) "
        "can show them.",
        "",
        "| status | meaning |",
        "|---|---|",
    ]
    out += [f"| `{s.value}` | {states.get(s.value, '')} |" for s in memory.MemoryStatus]
    out += [
        "",
        "See [the pipeline](pipeline.md) for the stages that create each type, "
        "[recall](../usage/recall.md) for how they are ranked and packed, and "
        "[memory commands](../usage/memory-commands.md) for changing them by hand.",
    ]
    return "\n".join(out) + "\n"
