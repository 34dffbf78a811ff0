"""MCP end to end: what a user said in a chat is what `recall` finds over MCP; `remember` and `forget_memory` go
through the log and the consolidator like any memory command, and the next call sees their effect."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.e2e.test_auth import memstream
from tests.mcp_client import server_env, stdio, structured, text
from tests.stack import Stack, produce, turn, wait_for

pytestmark = pytest.mark.e2e
TENANT = "mcp-e2e"


async def _until(client: Client, tool: str, args: dict[str, Any], holds: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        answer = structured(await client.call_tool(tool, args))
        if holds(answer):
            return answer
        assert time.monotonic() < deadline, f"{what}: last answer {answer}"
        await asyncio.sleep(0.3)


async def test_mcp_recalls_what_was_said_and_remembers_and_forgets_through_the_log(
    stack: Stack, tmp_path: Path
) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I am allergic to peanuts, please remember that.")])
    wait_for(lambda: stack.memories(TENANT, user), 60, "memory from the chat stored")
    made = memstream(stack, "keys", "create", "--tenant", TENANT, "--role", "write", "--name", "mcp e2e")
    assert made.returncode == 0, made.stderr

    env = server_env(stack.base_url, tmp_path, TENANT, user, MEMSTREAM_API_KEY=made.stdout.strip())
    async with stdio(env) as client:
        recalled = structured(await client.call_tool("recall", {"query": "any food allergies?"}))
        assert "peanuts" in recalled["memories"][0]["text"]
        assert "peanuts" in recalled["prompt"]

        added = structured(
            await client.call_tool("remember", {"text": "The user's daughter is called Ana.", "type": "fact"})
        )
        assert added["status"] in {"accepted", "applied"}
        new_id = added["memory_id"]
        await _until(
            client,
            "list_memories",
            {},
            lambda answer: new_id in {m["id"] for m in answer["memories"]},
            "remembered memory listed",
        )
        found = structured(await client.call_tool("recall", {"query": "what is the daughter's name?", "top_k": 3}))
        assert found["memories"][0]["id"] == new_id

        forgotten = structured(await client.call_tool("forget_memory", {"memory_id": new_id}))
        assert forgotten["status"] in {"accepted", "applied"}
        await _until(
            client,
            "list_memories",
            {},
            lambda answer: new_id not in {m["id"] for m in answer["memories"]},
            "forgotten memory gone from the active list",
        )
        after = structured(await client.call_tool("recall", {"query": "what is the daughter's name?"}))
        assert new_id not in {m["id"] for m in after["memories"]}
        assert "Ana" not in after["prompt"]
        history = structured(await client.call_tool("list_memories", {"status": "deleted"}))
        assert [m["id"] for m in history["memories"]] == [new_id]

        again = await client.call_tool("forget_memory", {"memory_id": new_id})
        assert again.is_error
        assert "HTTP 409" in text(again)
