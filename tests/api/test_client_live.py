"""The memstream client against the real read service (real Postgres, a Kafka that never answers).

Reads, the key routes and every error class come back typed; commands and
turns cannot be acknowledged by this broker, so they end in `Unavailable`,
after the retries the client allows and no longer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

import memstream
from schemas import ChangeOp, MemoryChange, Role, TurnEvent
from services.auth import Role as KeyRole
from services.stores.index_feed import apply_changes
from tests.api.conftest import LiveApi
from tests.factories import memory_record
from tests.stack import run_cli

TENANT = "client-live"
NOW = datetime.now(UTC).replace(microsecond=0)
TEXTS = ("I take my coffee black, no sugar", "I live in Lisbon")
ROOT = Path(__file__).resolve().parents[2]


async def _seed(api: LiveApi, user: str) -> list[str]:
    """Two memories from session s1 (indexed, so recall finds them) and the turn they came from."""
    rt = api.rt
    vectors = (await rt.embedder()).embed(list(TEXTS))
    records = [memory_record(t, tenant=TENANT, user=user, at=NOW, session="s1", events=("e1",)) for t in TEXTS]
    turn = TurnEvent(
        event_id="e1",
        tenant_id=TENANT,
        user_id=user,
        session_id="s1",
        turn_index=0,
        role=Role.USER,
        content=TEXTS[0],
        ts=NOW,
    )
    async with rt.pg.transaction("seed") as conn:
        for record, vector in zip(records, vectors, strict=True):
            await rt.memories.upsert(conn, record, vector)
        await rt.windows.archive_turn(conn, turn)
        await rt.windows.save_window(conn, TENANT, user, "s1", [turn], 8)
    changes = [
        MemoryChange(tenant_id=TENANT, user_id=user, op=ChangeOp.ADDED, record=r, vector=v, cause=[], committed_at=NOW)
        for r, v in zip(records, vectors, strict=True)
    ]
    await apply_changes(rt, changes)
    return [r.id for r in records]


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> tuple[str, list[str]]:
    user = f"client-{uuid.uuid4().hex[:8]}"
    return user, api.run(_seed(api, user))


@pytest.fixture(scope="module")
def admin_key(api: LiveApi) -> str:
    return api.new_key(TENANT, KeyRole.ADMIN, "client tests")[1]


def test_reads_come_back_typed(api: LiveApi, seeded: tuple[str, list[str]], admin_key: str) -> None:
    user, ids = seeded
    with memstream.Client(api.base_url, api_key=admin_key) as client:
        assert client.healthz() == {"status": "ok"}
        assert client.readyz().checks["postgres"] is True  # the silent broker makes it not ready, not an error
        found = client.recall(TENANT, user, "how does the user take coffee?", top_k=5)
        assert found.memories[0].id == ids[0]
        assert "coffee black" in found.prompt
        listed = client.list_memories(TENANT, user, status="active")
        assert {m.id for m in listed} == set(ids)
        assert all(m.status == "active" and m.source["session_id"] == "s1" for m in listed)
        assert [v.id for v in client.history(TENANT, user, ids[1]).chain] == [ids[1]]
        window = client.working(TENANT, user, "s1")
        assert [t.content for t in window.turns] == [TEXTS[0]]
        document = client.export(TENANT, user)
        assert {m["id"] for m in document["memories"]} == set(ids)


def test_users_and_one_memory_with_its_sources(api: LiveApi, seeded: tuple[str, list[str]], admin_key: str) -> None:
    user, ids = seeded
    with memstream.Client(api.base_url, api_key=admin_key) as client:
        detail = client.get_memory(TENANT, user, ids[0])
        assert detail.memory.text == TEXTS[0]
        assert [s.event_id for s in detail.sources] == ["e1"]
        assert any(u.user_id == user and u.total == 2 for u in client.list_users(TENANT).users)


async def test_the_async_client_reads_the_same(api: LiveApi, seeded: tuple[str, list[str]], admin_key: str) -> None:
    user, ids = seeded
    async with memstream.AsyncClient(api.base_url, api_key=admin_key) as client:
        found = await client.recall(TENANT, user, "where does the user live?", top_k=5)
        assert found.memories[0].id == ids[1]
        assert {m.id for m in await client.list_memories(TENANT, user)} == set(ids)
        with pytest.raises(memstream.NotFound):
            await client.history(TENANT, user, str(uuid.uuid4()))


def test_keys_are_created_listed_and_revoked(api: LiveApi, admin_key: str) -> None:
    with memstream.Client(api.base_url, api_key=admin_key) as client:
        made = client.create_key("read", "client test reader")
        assert made.record.tenant_id == TENANT
        assert made.record.role == "read"
        assert made.record.id in {k.id for k in client.list_keys()}
        with memstream.Client(api.base_url, api_key=made.key) as reader, pytest.raises(memstream.Forbidden):
            reader.list_keys()  # /v1/keys needs admin
        assert client.revoke_key(made.record.id).revoked_at is not None
        with pytest.raises(memstream.NotFound):
            client.revoke_key(made.record.id)


def test_operations_need_an_admin(api: LiveApi) -> None:
    """Refused before the broker is asked (this one never answers): the routes and the client's paths agree."""
    reader = api.new_key(TENANT, KeyRole.READ, "client ops reader")[1]
    with memstream.Client(api.base_url, api_key=reader, retries=0) as client:
        with pytest.raises(memstream.Forbidden):
            client.lag()
        with pytest.raises(memstream.Forbidden):
            client.dead_letters(limit=5)


def test_each_error_answer_is_its_exception(api: LiveApi, seeded: tuple[str, list[str]], admin_key: str) -> None:
    user, _ = seeded
    with memstream.Client(api.base_url, api_key="not-a-key", retries=0) as stranger:
        with pytest.raises(memstream.Unauthorized) as unauthorized:
            stranger.list_memories(TENANT, user)
        assert unauthorized.value.code == "unauthorized"
    with memstream.Client(api.base_url, api_key=admin_key, retries=0) as client:
        with pytest.raises(memstream.Forbidden):
            client.list_memories("another-tenant", user)
        with pytest.raises(memstream.BadRequest) as invalid:
            client.history(TENANT, user, "not-a-uuid")
        assert invalid.value.code == "validation_error"
        with pytest.raises(memstream.NotFound):
            client.get_memory(TENANT, user, str(uuid.uuid4()))
        with pytest.raises(memstream.NotFound):
            client.delete_session(TENANT, user, "s-unknown")
        # Ids with dots, "?" and "#" stay one path segment.
        assert client.list_memories(TENANT, "..") == []
        assert client.list_memories(TENANT, "a?b#c") == []


def test_commands_the_broker_cannot_acknowledge_raise_unavailable_after_the_retries(
    api: LiveApi, seeded: tuple[str, list[str]], admin_key: str
) -> None:
    user, ids = seeded
    with memstream.Client(api.base_url, api_key=admin_key, retries=1) as client:
        started = time.monotonic()
        with pytest.raises(memstream.Unavailable) as add:
            client.add_memory(TENANT, user, "Likes jazz", type="preference", wait=True)
        assert add.value.retry_after is not None
        assert time.monotonic() - started < 5  # an add is not sent twice
        started = time.monotonic()
        with pytest.raises(memstream.Unavailable):
            client.delete_memory(TENANT, user, ids[1], wait=True)
        assert time.monotonic() - started < 12  # sent twice, Retry-After (2 s) apart
    with memstream.Client(api.base_url, api_key=admin_key, retries=0) as client:
        with pytest.raises(memstream.Unavailable):
            client.correct_memory(TENANT, user, ids[1], "I live in Porto", wait=True)
        event = {"event_id": "e9", "tenant_id": TENANT, "user_id": user, "session_id": "s2", "turn_index": 0}
        with pytest.raises(memstream.Unavailable):
            client.send_turns({**event, "role": "user", "content": "hello", "ts": NOW.isoformat()})
        assert {m.id for m in client.list_memories(TENANT, user)} == set(ids)


def test_an_unreachable_service_is_a_transport_error() -> None:
    with memstream.Client("http://127.0.0.1:9", retries=1) as client, pytest.raises(memstream.TransportError):
        client.healthz()


@pytest.mark.parametrize("script", ["client_sync.py", "client_async.py"])
def test_the_documented_examples_run(api: LiveApi, seeded: tuple[str, list[str]], admin_key: str, script: str) -> None:
    user, _ = seeded
    # PYTHONPATH: the checkout, as an installed memstream would be for a user.
    env = {**os.environ, "MEMSTREAM_URL": api.base_url, "MEMSTREAM_API_KEY": admin_key, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / script), TENANT, user],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "coffee black" in done.stdout
    assert "not applied now" in done.stdout  # the silent broker: the example's Unavailable branch


@pytest.mark.parametrize("script", ["client_sync.py", "client_async.py"])
def test_the_page_shows_the_examples_as_they_run(script: str) -> None:
    page = (ROOT / "docs" / "client.md").read_text(encoding="utf-8")
    code = (ROOT / "docs" / "examples" / script).read_text(encoding="utf-8")
    assert f"```python\n{code.rstrip()}\n```" in page


def test_the_cli_reads_and_writes_through_the_client(
    api: LiveApi, seeded: tuple[str, list[str]], admin_key: str, tmp_path: Path
) -> None:
    user, ids = seeded
    port = api.base_url.rsplit(":", 1)[1]
    env = {
        **os.environ,
        "MEMSTREAM_HTTP_HOST": "127.0.0.1",
        "MEMSTREAM_HTTP_PORT": port,
        "MEMSTREAM_API_KEY": admin_key,
        "MEMSTREAM_DATA_DIR": str(tmp_path),
    }
    scope = ("--tenant", TENANT, "--user", user)
    recalled = run_cli(env, "recall", *scope, "coffee", timeout=120)
    assert recalled.returncode == 0, recalled.stderr
    assert "coffee black" in recalled.stdout
    listed = run_cli(env, "memories", "list", *scope, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert all(i in listed.stdout for i in ids)
    status = run_cli(env, "status", timeout=120)
    assert status.returncode == 1  # the silent broker: not ready
    assert '"ready": false' in status.stdout
    missing = run_cli(env, "memories", "delete", *scope, "--topic", "skydiving", timeout=120)
    assert missing.returncode == 1
    assert "error 404" in missing.stderr
    unacknowledged = run_cli(env, "memories", "add", *scope, "--type", "fact", "--text", "Likes jazz", timeout=120)
    assert unacknowledged.returncode == 1
    assert "error 503" in unacknowledged.stderr
    unreachable = run_cli({**env, "MEMSTREAM_HTTP_PORT": "9"}, "status", timeout=120)
    assert unreachable.returncode == 1
    assert "not reachable" in unreachable.stdout
