"""`as_of` recall over a real server: memory as it stood then, ranked as of then, and a future time as now.

A keyed fact that moved (Berlin, then Paris) is written as the consolidator
writes a supersession: the old row retired with `superseded_at`, the new one
active and in the index.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import content_hash, stable_id
from services.stores.index_feed import apply_changes
from tests.api.conftest import LiveApi

NOW = datetime.now(UTC)
SAID_BERLIN = NOW - timedelta(days=400)
MOVED = SAID_BERLIN + timedelta(days=100)
QUERY = "where does the user live?"


def _fact(user: str, city: str, at: datetime, **changes: Any) -> MemoryRecord:
    text = f"User lives in {city}"
    fields: dict[str, Any] = {
        "id": stable_id("as-of", user, city),
        "tenant_id": "t",
        "user_id": user,
        "type": MemoryType.FACT,
        "text": text,
        "content_hash": content_hash(text),
        "category": "location",
        "key_name": "city",
        "value": city,
        "importance": 0.85,
        "confidence": 0.9,
        "status": MemoryStatus.ACTIVE,
        "observed_at": at,
        "created_at": at,
        "updated_at": at,
        "source": Provenance(session_id="s1", event_ids=[f"e-{city}"]),
    }
    return MemoryRecord(**{**fields, **changes})


async def _seed(api: LiveApi, user: str) -> None:
    rt = api.rt
    berlin_vector, paris_vector = (await rt.embedder()).embed(["User lives in Berlin", "User lives in Paris"])
    paris = _fact(user, "Paris", MOVED)
    berlin = _fact(
        user,
        "Berlin",
        SAID_BERLIN,
        status=MemoryStatus.SUPERSEDED,
        superseded_at=MOVED,
        superseded_by=paris.id,
        updated_at=MOVED,
        # Recalled a lot, lately: neither may leak into a past answer's recency.
        access_count=7,
        last_accessed_at=NOW - timedelta(days=1),
    )
    async with rt.pg.transaction("seed") as conn:
        await rt.memories.upsert(conn, berlin, berlin_vector)
        await rt.memories.upsert(conn, paris, paris_vector)
    change = MemoryChange(
        tenant_id="t", user_id=user, op=ChangeOp.ADDED, record=paris, vector=paris_vector, cause=[], committed_at=NOW
    )
    await apply_changes(rt, [change])


@pytest.fixture(scope="module")
def moved_user(api: LiveApi) -> str:
    user = f"as-of-{uuid.uuid4().hex[:8]}"
    api.run(_seed(api, user))
    return user


def recall(api: LiveApi, user: str, as_of: datetime | str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"tenant_id": "t", "user_id": user, "query": QUERY, "record_access": False, **extra}
    if as_of is not None:
        body["as_of"] = as_of if isinstance(as_of, str) else as_of.isoformat()
    response = api.client.post("/v1/recall", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def texts(result: dict[str, Any]) -> list[str]:
    return [m["text"] for m in result["memories"]]


def test_between_the_two_statements_the_old_value_answers_after_them_the_new(api: LiveApi, moved_user: str) -> None:
    then = recall(api, moved_user, MOVED - timedelta(days=1))
    assert texts(then) == ["User lives in Berlin"]
    assert "[FACT] User lives in Berlin" in then["prompt"]
    assert texts(recall(api, moved_user, MOVED + timedelta(seconds=1))) == ["User lives in Paris"]
    assert texts(recall(api, moved_user, SAID_BERLIN - timedelta(seconds=1))) == []
    assert texts(recall(api, moved_user, None)) == ["User lives in Paris"]


def test_a_past_answer_is_ranked_as_of_then(api: LiveApi, moved_user: str) -> None:
    [berlin] = recall(api, moved_user, SAID_BERLIN + timedelta(hours=1))["memories"]
    # A day-old memory then (recency ~1), though 400 days old now; its later recall is not part of then.
    assert berlin["signals"]["recency"] > 0.99
    assert berlin["last_accessed_at"] is None
    [paris] = recall(api, moved_user, None)["memories"]
    assert paris["signals"]["recency"] < 0.5  # 300 days old now


def test_a_time_not_in_the_past_answers_like_now(api: LiveApi, moved_user: str) -> None:
    now = recall(api, moved_user, None)
    future = recall(api, moved_user, NOW + timedelta(days=3650))
    assert texts(future) == texts(now) == ["User lives in Paris"]
    assert [m["id"] for m in future["memories"]] == [m["id"] for m in now["memories"]]


def test_other_users_and_types_stay_out_of_a_past_answer(api: LiveApi, moved_user: str) -> None:
    at = MOVED - timedelta(days=1)
    assert texts(recall(api, f"{moved_user}-other", at)) == []
    assert texts(recall(api, moved_user, at, types=["preference"])) == []
    assert texts(recall(api, moved_user, at, types=["fact"], format="sections")) == ["User lives in Berlin"]


@pytest.mark.parametrize(
    "as_of",
    ["2025-03-01T12:00:00", "2025-03-01", "yesterday", 1740830400, "2025-02-30T12:00:00Z", "2300-01-01T00:00:00Z"],
)
def test_as_of_must_be_an_rfc3339_time_with_an_offset(api: LiveApi, as_of: Any) -> None:
    body = {"tenant_id": "t", "user_id": "u", "query": QUERY, "as_of": as_of}
    response = api.client.post("/v1/recall", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["loc"] == ["body", "as_of"]
