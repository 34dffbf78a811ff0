"""`memstream mcp` driven by the MCP SDK's own client, over stdio and streamable HTTP, against the live read service.

The server is the real command (`python -m services.cli mcp`), spawned by
the SDK's stdio client with only the environment a user would give it; its
tools call the real read service with real API keys. Memories are seeded
in the stores underneath. Writes (remember, forget_memory) need the worker:
tests/e2e/test_mcp.py covers them through the embedded stack.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.auth import Role
from services.core.textutil import content_hash, stable_id
from services.stores.index_feed import apply_changes
from tests.api.conftest import LiveApi
from tests.mcp_client import ROOT, TOOLS, server_env, stdio, structured, text

TENANT, USER = "mcp-tenant", "mcp-user"
# Another tenant's user, and another user of the same tenant: what a bound server must never reach.
VICTIM_TENANT, VICTIM, NEIGHBOUR = "mcp-victim-tenant", "mcp-victim", "mcp-neighbour"
NOW = datetime.now(UTC)
SEEDED = {
    "tea": (MemoryType.PREFERENCE, "The user drinks green tea, never coffee."),
    "city": (MemoryType.FACT, "The user lives in Porto."),
}
SECRETS = {"secret": (MemoryType.FACT, "The user's bank PIN is 4321 and they drink green tea.")}


async def _seed(
    api: LiveApi, tenant: str = TENANT, user: str = USER, memories: dict[str, tuple[MemoryType, str]] = SEEDED
) -> dict[str, str]:
    rt = api.rt
    vectors = (await rt.embedder()).embed([text for _, text in memories.values()])
    ids: dict[str, str] = {}
    changes: list[MemoryChange] = []
    async with rt.pg.transaction("seed") as conn:
        for (name, (type_, text)), vector in zip(memories.items(), vectors, strict=True):
            ids[name] = stable_id("mcp-test", tenant, user, name)
            record = MemoryRecord(
                id=ids[name],
                tenant_id=tenant,
                user_id=user,
                type=type_,
                text=text,
                content_hash=content_hash(text),
                importance=0.7,
                confidence=1.0,
                status=MemoryStatus.ACTIVE,
                observed_at=NOW,
                created_at=NOW,
                updated_at=NOW,
                source=Provenance(session_id="s-mcp", event_ids=[f"e-{name}"]),
            )
            await rt.memories.upsert(conn, record, vector)
            changes.append(
                MemoryChange(
                    tenant_id=tenant, user_id=user, op=ChangeOp.ADDED, record=record, vector=vector, cause=[],
                    committed_at=NOW,
                )
            )  # fmt: skip
    await apply_changes(rt, changes)
    return ids


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> dict[str, str]:
    return api.run(_seed(api))


@pytest.fixture(scope="module")
def others(api: LiveApi) -> dict[str, str]:
    """A memory of another tenant's user and one of another user of the server's tenant, by owner."""
    victim = api.run(_seed(api, VICTIM_TENANT, VICTIM, SECRETS))["secret"]
    neighbour = api.run(_seed(api, TENANT, NEIGHBOUR, SECRETS))["secret"]
    return {VICTIM_TENANT: victim, TENANT: neighbour}


@pytest.fixture(scope="module")
def read_key(api: LiveApi) -> str:
    """A read-only key of the seeded tenant: what an assistant's MCP server would be given."""
    return api.new_key(TENANT, Role.READ, "mcp test")[1]


def _env(api: LiveApi, data_dir: Path, **extra: str) -> dict[str, str]:
    return server_env(api.base_url, data_dir, TENANT, USER, **extra)


async def test_tools_over_stdio_recall_and_list_the_users_memories(
    api: LiveApi, seeded: dict[str, str], read_key: str, tmp_path: Path
) -> None:
    async with stdio(_env(api, tmp_path, MEMSTREAM_API_KEY=read_key)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert tools["recall"].input_schema["required"] == ["query"]
        assert "top_k" in tools["recall"].input_schema["properties"]
        assert not {"tenant_id", "user_id"} & set(tools["recall"].input_schema["properties"])

        recalled = structured(await client.call_tool("recall", {"query": "what does the user like to drink?"}))
        assert recalled["memories"][0]["id"] == seeded["tea"], recalled
        assert "green tea" in recalled["prompt"]
        assert "green tea" in text(await client.call_tool("recall", {"query": "tea or coffee?", "top_k": 1}))

        listed = structured(await client.call_tool("list_memories", {}))
        assert {m["id"] for m in listed["memories"]} == set(seeded.values())
        assert {m["text"] for m in listed["memories"]} == {text for _, text in SEEDED.values()}
        only_facts = structured(await client.call_tool("list_memories", {"type": "fact"}))
        assert [m["id"] for m in only_facts["memories"]] == [seeded["city"]]

        # A call naming another user still acts for the bound one.
        same = structured(await client.call_tool("list_memories", {"user_id": "someone-else"}))
        assert {m["id"] for m in same["memories"]} == set(seeded.values())


def _active(api: LiveApi, tenant: str, user: str, memory_id: str) -> bool:
    async def held() -> bool:
        async with api.rt.pg.connection("check") as conn:
            found = await api.rt.memories.with_vector(conn, tenant, user, memory_id)
        return found is not None and found[0].status is MemoryStatus.ACTIVE

    return api.run(held())


async def test_the_model_cannot_reach_another_tenants_or_users_memories_even_with_the_operator_key(
    api: LiveApi, seeded: dict[str, str], others: dict[str, str], tmp_path: Path
) -> None:
    """A prompt injection's best try: name the other owner in every argument it can, or their memory's id."""
    operator = api.client.headers["authorization"][7:]
    owners = [(VICTIM_TENANT, VICTIM), (TENANT, NEIGHBOUR)]
    async with stdio(_env(api, tmp_path, MEMSTREAM_API_KEY=operator)) as client:
        for tenant, user in owners:
            named = {"tenant_id": tenant, "user_id": user}
            calls: list[tuple[str, dict[str, Any]]] = [
                ("recall", {"query": "what is the bank PIN?", **named}),
                ("list_memories", {"status": None, **named}),
            ]
            for tool, args in calls:
                answer = await client.call_tool(tool, args)
                assert "4321" not in text(answer), (tool, tenant)
                assert others[tenant] not in text(answer)
                assert {m["id"] for m in structured(answer)["memories"]} <= set(seeded.values())
            forgot = await client.call_tool("forget_memory", {"memory_id": others[tenant], "wait": False, **named})
            assert forgot.is_error
            assert "HTTP 404" in text(forgot)
            assert _active(api, tenant, user, others[tenant])


async def test_api_errors_come_back_as_tool_errors_with_the_apis_message(
    api: LiveApi, seeded: dict[str, str], read_key: str, tmp_path: Path
) -> None:
    other_tenant = api.new_key("another-tenant", Role.READ, "mcp test other")[1]
    async with stdio(_env(api, tmp_path, MEMSTREAM_API_KEY=other_tenant)) as client:
        denied = await client.call_tool("recall", {"query": "tea"})
        assert denied.is_error
        assert "HTTP 403, forbidden" in text(denied)
        assert "green tea" not in text(denied)

    async with stdio(_env(api, tmp_path, MEMSTREAM_API_KEY="ms_not-a-key")) as client:
        refused = await client.call_tool("list_memories", {})
        assert refused.is_error
        assert "HTTP 401, unauthorized" in text(refused)

    async with stdio({**_env(api, tmp_path, MEMSTREAM_API_KEY=read_key), "MEMSTREAM_MCP_USER": "no:colons"}) as client:
        invalid = await client.call_tool("list_memories", {})
        assert invalid.is_error
        assert "HTTP 422, validation_error" in text(invalid)
        assert "user_id" in text(invalid)

    async with stdio(_env(api, tmp_path, MEMSTREAM_API_KEY=read_key)) as client:
        # A write with a read key: the API's role check answers, not the MCP server.
        written = await client.call_tool("remember", {"text": "The user has a cat.", "wait": False})
        assert written.is_error
        assert "HTTP 403, forbidden" in text(written)
        assert "write key" in text(written)


async def test_without_a_key_the_tool_says_what_to_set(api: LiveApi, tmp_path: Path) -> None:
    async with stdio(_env(api, tmp_path)) as client:
        no_key = await client.call_tool("recall", {"query": "tea"})
        assert no_key.is_error
        assert "MEMSTREAM_API_KEY" in text(no_key)


async def test_allow_any_user_lets_the_model_choose_within_what_the_key_reaches(
    api: LiveApi, seeded: dict[str, str], others: dict[str, str], read_key: str, tmp_path: Path
) -> None:
    """The explicit, dangerous mode: the model names the user; a tenant key still fences the tenant."""
    env = _env(api, tmp_path, MEMSTREAM_API_KEY=read_key, MEMSTREAM_MCP_ALLOW_ANY_USER="true")
    del env["MEMSTREAM_MCP_USER"], env["MEMSTREAM_MCP_TENANT"]
    async with stdio(env) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"tenant_id", "user_id"} <= set(tools["list_memories"].input_schema["properties"])
        mine = structured(await client.call_tool("list_memories", {"tenant_id": TENANT, "user_id": USER}))
        assert {m["id"] for m in mine["memories"]} == set(seeded.values())
        neighbour = structured(await client.call_tool("list_memories", {"tenant_id": TENANT, "user_id": NEIGHBOUR}))
        assert [m["id"] for m in neighbour["memories"]] == [others[TENANT]]
        other_tenant = await client.call_tool("list_memories", {"tenant_id": VICTIM_TENANT, "user_id": VICTIM})
        assert other_tenant.is_error
        assert "HTTP 403" in text(other_tenant)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def mcp_http(api: LiveApi, tmp_path: Path) -> Iterator[str]:
    """`memstream mcp --http` holding the operator's key in its environment, which it must not lend to callers."""
    port = _free_port()
    env = {"PATH": "/usr/bin:/bin", **_env(api, tmp_path, MEMSTREAM_API_KEY=api.client.headers["authorization"][7:])}
    log = (tmp_path / "mcp-http.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "mcp", "--http", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "mcp-http.log").read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "mcp --http did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


async def test_over_http_each_client_brings_its_own_key(mcp_http: str, seeded: dict[str, str], read_key: str) -> None:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {read_key}"}) as http,
        Client(streamable_http_client(mcp_http, http_client=http)) as client,
    ):
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        recalled = structured(await client.call_tool("recall", {"query": "which city does the user live in?"}))
        assert recalled["memories"][0]["id"] == seeded["city"]

    async with Client(mcp_http) as anonymous:
        refused = await anonymous.call_tool("recall", {"query": "which city does the user live in?"})
        assert refused.is_error
        assert "Authorization: Bearer" in text(refused)
        assert "Porto" not in text(refused)
