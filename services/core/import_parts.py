"""An export document cut into `import` commands that each fit in a message (pure).

The read service cuts the document it is given (413 when one item cannot fit
alone); the commands stage applies the parts in order. Tests build parts the
same way to drive the stage.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel

from schemas.commands import ImportPart
from schemas.export import ExportDocument
from services.core.textutil import stable_id

# Room for the part's own fields (ids, counts, model name) around its items.
_ENVELOPE_BYTES = 4096


class ItemTooLarge(ValueError):
    """One memory, turn or session of a document does not fit in a message on its own."""


def import_parts(
    doc: ExportDocument, tenant_id: str, user_id: str, import_id: str, at: datetime, max_bytes: int
) -> list[ImportPart]:
    """A document as ImportPart commands of at most `max_bytes` each (JSON), in the document's order.

    Memories travel with their vectors; each part is applied in its own
    claim, in order, so a large import is several messages but one history.
    """
    budget = max_bytes - _ENVELOPE_BYTES
    sections: list[tuple[str, Any, int]] = []
    for record in doc.memories:
        vector = doc.vectors.get(record.id)
        size = _size(record) + (0 if vector is None else len(orjson.dumps(vector)) + 64)
        sections.append(("memories", record, size))
    sections += [("sessions", s, _size(s)) for s in doc.sessions]
    sections += [("turns", t, _size(t)) for t in doc.turns]
    sections += [("session_summaries", s, _size(s)) for s in doc.session_summaries]
    chunks: list[dict[str, list[Any]]] = []
    used = budget + 1  # the first item opens a part
    for section, item, size in sections:
        if size > budget:
            raise ItemTooLarge(f"one of the document's {section} is {size} bytes; a message holds {budget}")
        if used + size > budget:
            chunks.append({"memories": [], "sessions": [], "turns": [], "session_summaries": []})
            used = 0
        chunks[-1][section].append(item)
        used += size
    chunks = chunks or [{"memories": [], "sessions": [], "turns": [], "session_summaries": []}]
    return [
        ImportPart(
            command_id=stable_id("import-part", import_id, str(n)),
            tenant_id=tenant_id,
            user_id=user_id,
            at=at,
            import_id=import_id,
            part=n,
            parts=len(chunks),
            source_tenant_id=doc.tenant_id,
            source_user_id=doc.user_id,
            embedding_model=doc.embedding_model,
            vectors={r.id: doc.vectors[r.id] for r in chunk["memories"] if r.id in doc.vectors},
            **chunk,
        )
        for n, chunk in enumerate(chunks)
    ]


def _size(model: BaseModel) -> int:
    return len(orjson.dumps(model.model_dump(mode="json"))) + 2
