"""The memory command routes on the live server, up to the broker: what they refuse before producing (404, 409,
422, 413), that an unacknowledged command is a 503, and the export document.

Kafka here is a socket that never answers, so no command is ever accepted: 202 and 200 (`?wait=true`) are
checked end to end through the embedded stack (tests/e2e/test_memory_commands.py).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from schemas import MemoryRecord, MemoryStatus, MemoryType, Provenance, TurnEvent
from schemas.export import EXPORT_FORMAT, ExportDocument
from services.auth import Role
from services.core.textutil import content_hash, stable_id
from tests.api.conftest import LiveApi, bearer
from tests.stack import user_path

TENANT = "mem-routes"
NOW = datetime(2026, 4, 1, tzinfo=UTC)


def record(user: str, text: str, status: MemoryStatus = MemoryStatus.ACTIVE, **fields: Any) -> MemoryRecord:
    return MemoryRecord.model_validate(
        {
            "id": stable_id("routes", user, text),
            "tenant_id": TENANT,
            "user_id": user,
            "type": MemoryType.PREFERENCE,
            "text": text,
            "content_hash": content_hash(text),
            "importance": 0.5,
            "confidence": 1.0,
            "status": status,
            "observed_at": NOW,
            "created_at": NOW,
            "updated_at": NOW,
            "source": Provenance(session_id="s1", event_ids=["e1"]),
            **fields,
        }
    )


async def _seed(api: LiveApi, user: str) -> dict[str, MemoryRecord]:
    rt = api.rt
    current = record(user, "I love green tea", entities=["Matcha House"])
    old = record(user, "I love coffee", MemoryStatus.SUPERSEDED, superseded_by=current.id)
    turn = TurnEvent(
        event_id="e1",
        tenant_id=TENANT,
        user_id=user,
        session_id="s1",
        turn_index=0,
        role="user",
        content="I love green tea",
        ts=NOW,
    )
    async with rt.pg.transaction("seed") as conn:
        await rt.memories.upsert(conn, old, [0.0, 1.0, 0.0])
        await rt.memories.upsert(conn, current, [1.0, 0.0, 0.0])
        await rt.windows.archive_turn(conn, turn)
        await rt.windows.save_window(conn, TENANT, user, "s1", [turn], 4)
    return {"current": current, "old": old}


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> tuple[str, dict[str, MemoryRecord]]:
    user = f"routes-{uuid.uuid4().hex[:8]}"
    return user, api.run(_seed(api, user))


def code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def users(user: str) -> str:
    return f"/v1/users/{user_path(user)}"


def test_writes_about_nothing_held_answer_404_before_anything_is_produced(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, _ = seeded
    unknown_id = str(uuid.uuid4())
    stranger = f"nobody-{uuid.uuid4().hex[:6]}"
    q = {"tenant_id": TENANT}
    started = time.monotonic()
    answers = [
        api.client.patch(f"{users(user)}/memories/{unknown_id}", params=q, json={"text": "x"}),
        api.client.delete(f"{users(user)}/memories/{unknown_id}", params=q),
        api.client.delete(f"{users(user)}/sessions/s-unknown/memories", params=q),
        api.client.delete(f"{users(user)}/memories", params={**q, "topic": "skydiving"}),
        api.client.delete(users(stranger), params=q),
        api.client.get(f"{users(stranger)}/export", params=q),
        # The same user under another tenant is unknown too.
        api.client.delete(users(user), params={"tenant_id": "another-tenant"}),
    ]
    assert [r.status_code for r in answers] == [404] * len(answers)
    assert {code(r) for r in answers} == {"not_found"}
    assert time.monotonic() - started < 5  # no wait for the (silent) broker: nothing was produced


def test_a_memory_that_is_no_longer_current_is_a_conflict_naming_its_successor(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, held = seeded
    old = held["old"]
    q = {"tenant_id": TENANT}
    for response in (
        api.client.patch(f"{users(user)}/memories/{old.id}", params=q, json={"text": "I love espresso"}),
        api.client.delete(f"{users(user)}/memories/{old.id}", params=q),
    ):
        assert response.status_code == 409
        assert code(response) == "conflict"
        assert held["current"].id in response.json()["error"]["message"]


def test_an_import_into_a_user_who_holds_data_is_a_conflict(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, _ = seeded
    doc = ExportDocument(exported_at=NOW, tenant_id="elsewhere", user_id="someone")
    response = api.client.post(
        f"{users(user)}/import", params={"tenant_id": TENANT}, json={"document": doc.model_dump(mode="json")}
    )
    assert response.status_code == 409


ADD = "/v1/users/u-422/memories"


@pytest.mark.parametrize(
    ("method", "path", "body", "params"),
    [
        ("POST", ADD, {"type": "preference"}, {}),  # no text
        ("POST", ADD, {"text": "hi"}, {}),  # no type
        ("POST", ADD, {"text": "hi", "type": "opinion"}, {}),
        ("POST", ADD, {"text": "   ", "type": "preference"}, {}),
        ("POST", ADD, {"text": "x" * 8001, "type": "preference"}, {}),
        ("POST", ADD, {"text": "hi", "type": "fact", "key_name": "city"}, {}),  # key without category
        ("POST", ADD, {"text": "hi", "type": "fact", "category": "loc", "value": "Berlin"}, {}),  # value, no key
        ("POST", ADD, {"text": "hi", "type": "preference", "importance": 1.5}, {}),
        ("POST", ADD, {"text": "hi", "type": "preference", "colour": "red"}, {}),  # unknown field
        ("POST", ADD, {"text": "hi", "type": "preference", "session_id": "a b"}, {}),
        ("POST", ADD, {"text": "hi", "type": "preference", "tenant_id": "other-t"}, {"tenant_id": TENANT}),
        ("POST", ADD, {"text": "hi", "type": "preference"}, {"wait": "maybe"}),
        ("PATCH", f"{ADD}/not-a-uuid", {"text": "hi"}, {}),
        ("PATCH", f"{ADD}/{uuid.uuid4()}", {}, {}),  # no text
        ("DELETE", ADD, None, {}),  # no topic
        ("DELETE", ADD, None, {"topic": ""}),
        ("DELETE", f"{ADD}/not-a-uuid", None, {}),
        ("POST", "/v1/users/u-422/import", {"document": {"format": "memstream.export/v9"}}, {}),
        ("POST", "/v1/users/u-422/import", {"format": EXPORT_FORMAT}, {}),  # the document not in `document`
    ],
)
def test_bad_requests_are_422(
    api: LiveApi, method: str, path: str, body: dict[str, Any] | None, params: dict[str, str]
) -> None:
    response = api.client.request(method, path, json=body, params={"tenant_id": TENANT, **params})
    assert response.status_code == 422, response.text
    assert code(response) == "validation_error"


def test_an_operator_key_must_name_the_tenant_and_a_tenant_key_need_not(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, _ = seeded
    assert api.client.get(f"{users(user)}/export").status_code == 422  # the operator: which tenant?
    _, key = api.new_key(TENANT, Role.READ, "export reader")
    own = httpx.get(f"{api.base_url}{users(user)}/export", headers=bearer(key), timeout=30)
    assert own.status_code == 200
    assert own.json()["tenant_id"] == TENANT


def test_a_command_the_broker_does_not_acknowledge_is_503_and_nothing_changes(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, held = seeded
    started = time.monotonic()
    response = api.client.post(
        f"{users(user)}/memories", params={"tenant_id": TENANT}, json={"type": "preference", "text": "Likes jazz"}
    )
    assert response.status_code == 503
    assert code(response) == "unavailable"
    assert "retry-after" in response.headers
    assert time.monotonic() - started < 4
    listed = api.client.get(f"{users(user)}/memories", params={"tenant_id": TENANT}).json()["memories"]
    assert {m["id"] for m in listed} == {held["current"].id, held["old"].id}


def test_the_export_holds_the_users_memories_with_history_turns_and_sessions(
    api: LiveApi, seeded: tuple[str, dict[str, MemoryRecord]]
) -> None:
    user, held = seeded
    response = api.client.get(f"{users(user)}/export", params={"tenant_id": TENANT})
    assert response.status_code == 200
    doc = ExportDocument.model_validate(response.json())
    # Streamed (no length known up front), and byte for byte the document as response_model serialized it.
    assert response.headers.get("transfer-encoding") == "chunked"
    assert response.content == doc.model_dump_json(by_alias=True).encode()
    assert (doc.format, doc.tenant_id, doc.user_id) == (EXPORT_FORMAT, TENANT, user)
    assert {m.id: m.status for m in doc.memories} == {
        held["old"].id: MemoryStatus.SUPERSEDED,
        held["current"].id: MemoryStatus.ACTIVE,
    }
    assert next(m for m in doc.memories if m.id == held["old"].id).superseded_by == held["current"].id
    assert [t.content for t in doc.turns] == ["I love green tea"]
    assert [s.session_id for s in doc.sessions] == ["s1"]
    assert doc.vectors == {}
    with_vectors = api.client.get(f"{users(user)}/export", params={"tenant_id": TENANT, "vectors": "true"}).json()
    assert with_vectors["embedding_model"] == "all-MiniLM-L6-v2-int8"  # the default model
    assert with_vectors["vectors"][held["current"].id] == [1.0, 0.0, 0.0]
