"""The MCP SDK's own client, pointed at `memstream mcp` as an MCP client configuration would start it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {"recall", "remember", "list_memories", "forget_memory"}


def server_env(api_url: str, data_dir: Path, tenant: str, user: str, **extra: str) -> dict[str, str]:
    """What a user puts in the client's server entry; nothing else of the test process leaks in."""
    return {
        "MEMSTREAM_API_URL": api_url,
        "MEMSTREAM_DATA_DIR": str(data_dir),
        "MEMSTREAM_MCP_TENANT": tenant,
        "MEMSTREAM_MCP_USER": user,
        "MEMSTREAM_LOG_LEVEL": "warning",
        **extra,
    }


def stdio(env: dict[str, str]) -> Client:
    """`python -m services.cli mcp` as a subprocess speaking MCP on its stdin/stdout."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "services.cli", "mcp"], env=env, cwd=ROOT)
    return Client(params, read_timeout_seconds=60)


def text(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


def structured(result: CallToolResult) -> dict[str, Any]:
    """A successful call's structured answer."""
    assert not result.is_error, text(result)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content
