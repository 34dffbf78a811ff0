"""Recall with the query-vector cache, over a real server and stores: a hit answers exactly what the miss did.

The cache (services/embedding/query_cache.py) only saves the model call:
ranking, packing and the prompt must come out the same whichever way the
query's vector arrived, and eight clients asking the same new question at
once cost one model call.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from services.core.metrics import QUERY_CACHE
from tests.api.conftest import LiveApi
from tests.api.test_recall_layers import _seed


@pytest.fixture(scope="module")
def user(api: LiveApi) -> str:
    name = f"cache-{uuid.uuid4().hex[:8]}"
    api.run(_seed(api, name))
    return name


def _lookups(result: str) -> float:
    return QUERY_CACHE.labels(result=result)._value.get()


def _body(user: str, query: str) -> dict[str, Any]:
    # No access marks: the two recalls compared must see the same memory.
    return {"tenant_id": "t", "user_id": user, "query": query, "top_k": 20, "record_access": False}


def _same(first: dict[str, Any], second: dict[str, Any]) -> None:
    """Equal answers; a score may move in its last digit only through recency's `now`."""
    assert [m["id"] for m in first["memories"]] == [m["id"] for m in second["memories"]]
    assert (first["prompt"], first["tokens_used"]) == (second["prompt"], second["tokens_used"])
    for a, b in zip(first["memories"], second["memories"], strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-5)
        assert a["signals"]["similarity"] == b["signals"]["similarity"]


def test_a_cached_query_recalls_what_the_model_computed_one_did(api: LiveApi, user: str) -> None:
    query = f"how does the user like coffee? ({uuid.uuid4().hex[:6]})"
    misses, hits = _lookups("miss"), _lookups("hit")
    first = api.client.post("/v1/recall", json=_body(user, query))
    assert (_lookups("miss"), _lookups("hit")) == (misses + 1, hits)
    second = api.client.post("/v1/recall", json=_body(user, query))
    assert (_lookups("miss"), _lookups("hit")) == (misses + 1, hits + 1)
    assert first.status_code == second.status_code == 200
    assert first.json()["memories"]
    _same(first.json(), second.json())
    assert 'memstream_query_embedding_lookups_total{result="hit"}' in api.client.get("/metrics").text


def test_eight_clients_asking_a_new_question_at_once_cost_one_model_call(api: LiveApi, user: str) -> None:
    query = f"what coffee shop is next to the river? ({uuid.uuid4().hex[:6]})"
    misses = _lookups("miss")
    headers = dict(api.client.headers)

    async def ask() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=api.base_url, timeout=30, headers=headers) as client:
            answers = await asyncio.gather(*(client.post("/v1/recall", json=_body(user, query)) for _ in range(8)))
        assert all(r.status_code == 200 for r in answers)
        return [r.json() for r in answers]

    answers = asyncio.run(ask())
    assert _lookups("miss") == misses + 1
    for answer in answers[1:]:
        _same(answers[0], answer)
