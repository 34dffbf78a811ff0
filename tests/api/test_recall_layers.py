"""Recall over a real server and stores: layers, sections, compressed episodes, ranking from the hit, access marks.

The test Kafka never answers, so these also show that access marks cannot
fail or stall a recall when the broker is unreachable.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.metrics import ACCESS_MARKS
from services.core.textutil import content_hash, stable_id
from services.stores.index_feed import apply_changes
from tests.api.conftest import LiveApi

NOW = datetime.now(UTC)
LONG_AGO = NOW - timedelta(days=720)

MEMORIES: list[tuple[str, MemoryType, str, dict[str, Any]]] = [
    ("pref", MemoryType.PREFERENCE, "User preference: I like my coffee black, no sugar.", {}),
    ("fact", MemoryType.FACT, "User lives in Lisbon", {"category": "location", "key_name": "city", "value": "Lisbon"}),
    ("episode", MemoryType.EPISODE, "We talked about brewing coffee with a French press at home.", {}),
    ("folded", MemoryType.EPISODE, "They compared coffee beans from Ethiopia and Kenya.", {"compressed": True}),
    ("old", MemoryType.EXCHANGE, "I grind coffee beans every morning before work.", {"observed_at": LONG_AGO}),
    (
        "recalled",
        MemoryType.EXCHANGE,
        "My favourite coffee shop is next to the river.",
        {"observed_at": LONG_AGO, "last_accessed_at": NOW, "access_count": 4},
    ),
]


async def _seed(api: LiveApi, user: str) -> dict[str, str]:
    rt = api.rt
    model = await rt.embedder()
    vectors = model.embed([text for _, _, text, _ in MEMORIES])
    ids: dict[str, str] = {}
    changes: list[MemoryChange] = []
    async with rt.pg.transaction("seed") as conn:
        for (name, type_, text, fields), vector in zip(MEMORIES, vectors, strict=True):
            extra = dict(fields)  # popped below: MEMORIES must stay as written for the next seeding
            ids[name] = stable_id("api-test", user, name)
            record = MemoryRecord(
                id=ids[name],
                tenant_id="t",
                user_id=user,
                type=type_,
                text=text,
                content_hash=content_hash(text),
                importance=0.5,
                confidence=1.0,
                status=MemoryStatus.ACTIVE,
                observed_at=extra.pop("observed_at", NOW),
                created_at=NOW,
                updated_at=NOW,
                source=Provenance(session_id="s1", event_ids=[f"e-{name}"]),
                **extra,
            )
            await rt.memories.upsert(conn, record, vector)
            changes.append(
                MemoryChange(
                    tenant_id="t",
                    user_id=user,
                    op=ChangeOp.ADDED,
                    record=record,
                    vector=vector,
                    cause=[],
                    committed_at=NOW,
                )
            )
    await apply_changes(rt, changes)
    return ids


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> tuple[str, dict[str, str]]:
    user = f"layers-{uuid.uuid4().hex[:8]}"
    return user, api.run(_seed(api, user))


def recall(api: LiveApi, user: str, **extra: Any) -> dict[str, Any]:
    body = {"tenant_id": "t", "user_id": user, "query": "how does the user like coffee?", "top_k": 20, **extra}
    response = api.client.post("/v1/recall", json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in result["memories"]}


def test_every_memory_carries_its_layer_and_compressed_episodes_stay_out_by_default(
    api: LiveApi, seeded: tuple[str, dict[str, str]]
) -> None:
    user, ids = seeded
    result = recall(api, user)
    found = by_id(result)
    assert ids["folded"] not in found
    assert {found[ids[n]]["layer"] for n in ("pref",)} == {"procedural"}
    assert found[ids["fact"]]["layer"] == "semantic"
    assert {found[ids[n]]["layer"] for n in ("episode", "old", "recalled")} == {"episodic"}
    assert result["prompt"].startswith("<memory>\n")
    assert result["prompt"].endswith("\n</memory>")
    assert "[EPISODE] We talked about brewing coffee" in result["prompt"]

    with_folded = by_id(recall(api, user, include_compressed=True))
    assert with_folded[ids["folded"]]["layer"] == "episodic"


def test_recency_and_access_come_from_the_index_hit(api: LiveApi, seeded: tuple[str, dict[str, str]]) -> None:
    user, ids = seeded
    found = by_id(recall(api, user))
    old, recalled = found[ids["old"]], found[ids["recalled"]]
    assert old["signals"]["recency"] < 0.3  # two years, two half-lives and more
    assert recalled["signals"]["recency"] > 0.99  # observed as long ago, but recalled just now
    assert recalled["signals"]["access"] > old["signals"]["access"] == 0.0
    assert recalled["access_count"] == 4
    assert recalled["last_accessed_at"] is not None


def test_sections_put_procedural_then_semantic_then_episodic(api: LiveApi, seeded: tuple[str, dict[str, str]]) -> None:
    user, _ = seeded
    result = recall(api, user, format="sections")
    layers = [m["layer"] for m in result["memories"]]
    order = ["procedural", "semantic", "episodic"]
    assert layers == sorted(layers, key=order.index)
    assert set(layers) == set(order)
    titles = re.findall(r"^([A-Z ]+):$", result["prompt"], flags=re.MULTILINE)
    assert titles == ["USER PROFILE", "PRIOR CONTEXT", "RECENT SESSIONS"]
    assert "<memory>" not in result["prompt"]


def test_recall_options_are_strict(api: LiveApi) -> None:
    base = {"tenant_id": "t", "user_id": "u", "query": "q"}
    for bad in ({"include_compressed": "true"}, {"include_compressed": 1}, {"format": "xml"}):
        assert api.client.post("/v1/recall", json={**base, **bad}).status_code == 422, bad


def test_an_unreachable_broker_neither_fails_nor_slows_recall(api: LiveApi, seeded: tuple[str, dict[str, str]]) -> None:
    user, _ = seeded
    sent = ACCESS_MARKS.labels(outcome="sent")._value.get()
    started = time.perf_counter()
    for _ in range(10):
        assert recall(api, user)["memories"]
    assert time.perf_counter() - started < 10  # the producer's 5 s connect timeout never shows
    assert ACCESS_MARKS.labels(outcome="sent")._value.get() == sent  # nothing reached the silent broker
    assert "memstream_access_marks_total" in api.client.get("/metrics").text


def test_a_recall_that_asks_not_to_record_access_marks_nothing(
    api: LiveApi, seeded: tuple[str, dict[str, str]]
) -> None:
    """Evaluations and audits look at memory without changing it (the LoCoMo bench asks this way)."""
    user, _ = seeded
    marks = api.thread.server.config.app.state.access_marks
    before = marks.recorded
    body = {"tenant_id": "t", "user_id": user, "query": "how does the user like coffee?", "record_access": False}
    response = api.client.post("/v1/recall", json=body)
    assert response.status_code == 200
    assert response.json()["memories"]
    assert marks.recorded == before
    returned = recall(api, user)["memories"]
    assert returned
    assert marks.recorded == before + len(returned)  # the default still marks each (held: the broker never answers)
