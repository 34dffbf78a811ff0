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

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agents.qdrant_sink.agent import apply_changes
from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.auth import Role
from services.textutil import content_hash, stable_id
from tests.api.conftest import LiveApi
from tests.mcp_client import ROOT, TOOLS, server_env, stdio, structured, text

TENANT, USER = "mcp-tenant", "mcp-user"
NOW = datetime.now(UTC)
SEEDED = {
    "tea": (MemoryType.PREFERENCE, "The user drinks green tea, never coffee."),
    "city": (MemoryType.FACT, "The user lives in Porto."),
}


async def _seed(api: LiveApi) -> dict[str, str]:
    rt = api.rt
    vectors = (await rt.embedder()).embed([text for _, text in SEEDED.values()])
    ids: dict[str, str] = {}
    changes: list[MemoryChange] = []
    async with rt.pg.transaction("seed") as conn:
        for (name, (type_, text)), vector in zip(SEEDED.items(), vectors, strict=True):
            ids[name] = stable_id("mcp-test", USER, name)
            record = MemoryRecord(
                id=ids[name],
                tenant_id=TENANT,
                user_id=USER,
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
                    tenant_id=TENANT, user_id=USER, op=ChangeOp.ADDED, record=record, vector=vector, cause=[],
                    committed_at=NOW,
                )
            )  # fmt: skip
    await apply_changes(rt, changes)
    return ids


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> dict[str, str]:
    return api.run(_seed(api))


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
        assert {"tenant_id", "user_id", "top_k"} <= set(tools["recall"].input_schema["properties"])

        recalled = structured(await client.call_tool("recall", {"query": "what does the user like to drink?"}))
        assert recalled["memories"][0]["id"] == seeded["tea"], recalled
        assert "green tea" in recalled["prompt"]
        assert "green tea" in text(await client.call_tool("recall", {"query": "tea or coffee?", "top_k": 1}))

        listed = structured(await client.call_tool("list_memories", {}))
        assert {m["id"] for m in listed["memories"]} == set(seeded.values())
        assert {m["text"] for m in listed["memories"]} == {text for _, text in SEEDED.values()}
        only_facts = structured(await client.call_tool("list_memories", {"type": "fact"}))
        assert [m["id"] for m in only_facts["memories"]] == [seeded["city"]]

        # Arguments name another user: the defaults are defaults, not a fence (the key is).
        nobody = structured(await client.call_tool("list_memories", {"user_id": "someone-else"}))
        assert nobody["memories"] == []


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

    async with stdio(_env(api, tmp_path, MEMSTREAM_API_KEY=read_key)) as client:
        invalid = await client.call_tool("list_memories", {"user_id": "no:colons"})
        assert invalid.is_error
        assert "HTTP 422, validation_error" in text(invalid)
        assert "user_id" in text(invalid)
        # A write with a read key: the API's role check answers, not the MCP server.
        written = await client.call_tool("remember", {"text": "The user has a cat.", "wait": False})
        assert written.is_error
        assert "HTTP 403, forbidden" in text(written)
        assert "write key" in text(written)


async def test_without_a_key_or_a_user_the_tool_says_what_to_set(api: LiveApi, tmp_path: Path) -> None:
    env = _env(api, tmp_path)
    del env["MEMSTREAM_MCP_USER"]
    async with stdio(env) as client:
        no_key = await client.call_tool("recall", {"query": "tea", "user_id": USER})
        assert no_key.is_error
        assert "MEMSTREAM_API_KEY" in text(no_key)
        no_user = await client.call_tool("recall", {"query": "tea"})
        assert no_user.is_error
        assert "MEMSTREAM_MCP_USER" in text(no_user)


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
            assert proc.poll() is None, (tmp_path / "mcp-http.log").readtext()
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
