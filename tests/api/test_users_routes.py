"""The console's reads on the live server: a tenant's users with counts, one memory with its source turns, and the
listing's layer, time and point-in-time filters. Every read is held to its tenant (a key of another tenant: 403)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance, TurnEvent
from services.auth import Role
from services.core.textutil import content_hash, stable_id
from tests.api.conftest import LiveApi, bearer
from tests.stack import user_path

TENANT = f"console-{uuid.uuid4().hex[:6]}"
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def record(user: str, text: str, type_: MemoryType, at: datetime, **fields: Any) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {
            "id": stable_id("console", user, text),
            "tenant_id": TENANT,
            "user_id": user,
            "type": type_,
            "text": text,
            "content_hash": content_hash(text),
            "importance": 0.5,
            "confidence": 1.0,
            "status": MemoryStatus.ACTIVE,
            "observed_at": at,
            "created_at": at,
            "updated_at": at,
            "source": Provenance(session_id="s1", event_ids=["e1"]),
            **fields,
        }
    )


async def _seed(api: LiveApi, user: str) -> dict[str, MemoryRecord]:
    rt = api.rt
    tea = record(user, "The user likes green tea", MemoryType.PREFERENCE, T0 + timedelta(days=2))
    paris = record(
        user,
        "The user lives in Paris",
        MemoryType.FACT,
        T0,
        status=MemoryStatus.SUPERSEDED,
        superseded_at=T0 + timedelta(days=5),
    )
    lyon = record(user, "The user lives in Lyon", MemoryType.FACT, T0 + timedelta(days=5))
    turn = TurnEvent(
        event_id="e1",
        tenant_id=TENANT,
        user_id=user,
        session_id="s1",
        turn_index=0,
        role="user",
        content="I like green tea",
        ts=T0,
    )
    async with rt.pg.transaction("seed") as conn:
        for r in (tea, paris, lyon):
            await rt.memories.upsert(conn, r, [1.0, 0.0, 0.0])
        await rt.windows.archive_turn(conn, turn)
    return {"tea": tea, "paris": paris, "lyon": lyon}


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> tuple[str, dict[str, MemoryRecord]]:
    user = f"u-{uuid.uuid4().hex[:8]}"
    return user, api.run(_seed(api, user))


def test_users_lists_the_tenant_users_with_counts(api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]) -> None:
    user, _ = seeded
    _, key = api.new_key(TENANT, Role.READ)
    got = api.client.get("/v1/users", headers=bearer(key))
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["tenant_id"] == TENANT
    [held] = [u for u in body["users"] if u["user_id"] == user]
    assert held["total"] == 3
    assert held["by_type"] == {"fact": 2, "preference": 1}
    assert held["by_status"] == {"active": 2, "superseded": 1}
    # A tenant key may not list another tenant; an operator must name one.
    assert api.client.get("/v1/users", params={"tenant_id": "other"}, headers=bearer(key)).status_code == 403
    assert api.client.get("/v1/users").status_code == 422


def test_one_memory_comes_with_its_source_turns(api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]) -> None:
    user, held = seeded
    path = f"/v1/users/{user_path(user)}/memories/{held['tea'].id}"
    got = api.client.get(path, params={"tenant_id": TENANT})
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["memory"]["text"] == "The user likes green tea"
    assert body["layer"] == "procedural"
    assert [(s["event_id"], s["session_id"], s["text"]) for s in body["sources"]] == [("e1", "s1", "I like green tea")]
    assert api.client.get(path, params={"tenant_id": "elsewhere"}).status_code == 404
    missing = f"/v1/users/{user_path(user)}/memories/{uuid.uuid4()}"
    assert api.client.get(missing, params={"tenant_id": TENANT}).status_code == 404


def test_listing_filters_by_layer_time_and_point_in_time(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, held = seeded
    path = f"/v1/users/{user_path(user)}/memories"

    def texts(**params: str) -> set[str]:
        got = api.client.get(path, params={"tenant_id": TENANT, **params})
        assert got.status_code == 200, got.text
        return {m["text"] for m in got.json()["memories"]}

    assert texts(layer="procedural") == {held["tea"].text}
    assert texts(layer="semantic") == {held["paris"].text, held["lyon"].text}
    assert texts(layer="procedural", type="fact") == set()
    assert texts(since=(T0 + timedelta(days=1)).isoformat()) == {held["tea"].text, held["lyon"].text}
    assert texts(until=(T0 + timedelta(days=1)).isoformat()) == {held["paris"].text}
    assert texts(as_of=(T0 + timedelta(days=3)).isoformat()) == {held["tea"].text, held["paris"].text}
    assert texts(status="superseded") == {held["paris"].text}
    assert api.client.get(path, params={"tenant_id": TENANT, "layer": "nope"}).status_code == 422
    # Times are RFC 3339 with an offset, as everywhere else: an epoch number (Schemathesis's find) or a naive
    # time is refused with a message, not read as 1970.
    for name, bad in (("since", "-1.6941360339801375e-60"), ("until", "1700000000"), ("as_of", "2026-01-01T00:00:00")):
        refused = api.client.get(path, params={"tenant_id": TENANT, name: bad})
        assert refused.status_code == 422, (name, bad, refused.text)
        assert name in refused.text
