"""Memory rows to records: the column list every memory query selects."""

from __future__ import annotations

from typing import Any

from schemas import MemoryRecord, Provenance

RECORD_COLUMNS = """id, tenant_id, user_id, type, text, content_hash, category, key_name, value, importance,
confidence, status, observed_at, created_at, updated_at, superseded_at, superseded_by, provenance, entities,
access_count, reinforcement_count, version, last_accessed_at, compressed, question, context"""


def record_from_row(row: dict[str, Any]) -> MemoryRecord:
    """A record from a row holding at least RECORD_COLUMNS; extra computed columns are ignored."""
    fields = {k: row[k] for k in MemoryRecord.model_fields if k in row}
    return MemoryRecord(source=Provenance.model_validate(row["provenance"]), **fields)


def vector_floats(value: Any) -> list[float] | None:
    """A pgvector value (Vector, ndarray or list, depending on registration) as plain floats; None stays None."""
    if value is None:
        return None
    to_list = getattr(value, "to_list", None)
    items = to_list() if callable(to_list) else value
    return [float(x) for x in items]
