"""The export document streamed a page at a time is byte for byte the document serialized whole.

"Whole" is what the HTTP route answered before it streamed: FastAPI's
response_model serialization of an `ExportDocument`, rendered here by a
FastAPI app of the same version.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from schemas.export import EXAMPLE, ExportDocument, ExportPage, ExportSection, document_json

SECTIONS: tuple[ExportSection, ...] = ("memories", "vectors", "sessions", "turns", "session_summaries")


def _document(memories: int) -> ExportDocument:
    base = ExportDocument.model_validate(EXAMPLE)
    template = base.memories[0]
    many = [
        template.model_copy(
            update={
                "id": f"00000000-0000-4000-8000-{n:012d}",
                "text": f'Préférence n°{n}: thé vert, pas de café ☕ "quoted" \\ {n / 3}',
                "importance": n / 7,
                "entities": ["thé", f"e{n}"],
            }
        )
        for n in range(memories)
    ]
    summary = {
        "session_id": "s-7",
        "summary": "tea ☕",
        "previous_summary": "",
        "chunk_id": "c1",
        "through_turn_index": 0,
        "through_event_id": "e-1",
        "updated_at": "2025-03-14T09:26:53.123456+02:00",
    }
    return ExportDocument.model_validate(
        {
            **base.model_dump(),
            "embedding_model": "all-MiniLM-L6-v2",
            "memories": [m.model_dump() for m in many],
            "vectors": {m.id: [n / 3, -1e-7, 1e22, 0.1] for n, m in enumerate(many) if n % 2 == 0},
            "session_summaries": [summary],
        }
    )


def _whole(doc: ExportDocument) -> bytes:
    """The route as it was: the document returned whole under response_model."""
    app = FastAPI()

    @app.get("/export", response_model=ExportDocument)
    async def export() -> ExportDocument:
        return doc

    with TestClient(app) as client:
        return client.get("/export").content


def _head(doc: ExportDocument) -> ExportDocument:
    return doc.model_copy(update={s: [] for s in SECTIONS} | {"vectors": {}})


def _items(doc: ExportDocument, section: ExportSection) -> list[Any]:
    return list(doc.vectors.items()) if section == "vectors" else list(getattr(doc, section))


async def _pages(doc: ExportDocument, size: int, skip: Sequence[ExportSection] = ()) -> AsyncIterator[ExportPage]:
    for section in SECTIONS:
        if section in skip:
            continue
        items = _items(doc, section)
        for start in range(0, len(items), size):
            yield ExportPage(section, items[start : start + size])


async def _streamed(doc: ExportDocument, pages: AsyncIterator[ExportPage]) -> tuple[bytes, int]:
    chunks = [chunk async for chunk in document_json(_head(doc), pages)]
    return b"".join(chunks), len(chunks)


@pytest.mark.parametrize(("memories", "page"), [(0, 1), (1, 1), (7, 3), (50, 50)])
async def test_the_streamed_document_is_the_whole_one_byte_for_byte(memories: int, page: int) -> None:
    doc = _document(memories)
    whole = _whole(doc)
    streamed, chunks = await _streamed(doc, _pages(doc, page))
    assert streamed == whole
    assert ExportDocument.model_validate_json(streamed) == doc
    assert chunks >= 2 + -(-memories // page)  # head, a chunk per page, the end


async def test_lists_with_no_page_are_written_empty() -> None:
    doc = _document(3)
    empty = doc.model_copy(update={"vectors": {}, "turns": [], "sessions": []})
    streamed, _ = await _streamed(empty, _pages(doc, 2, skip=("vectors", "sessions", "turns")))
    assert streamed == _whole(empty)


async def test_pages_out_of_order_are_refused() -> None:
    doc = _document(2)

    async def backwards() -> AsyncIterator[ExportPage]:
        yield ExportPage("turns", _items(doc, "turns"))
        yield ExportPage("memories", _items(doc, "memories"))

    with pytest.raises(ValueError, match="out of the document's order"):
        await _streamed(doc, backwards())
