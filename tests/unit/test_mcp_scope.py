"""Whom `memstream mcp`'s tools act for, without a read service: the scope rule, the schemas, the refusal to start.

What a call then reaches through the real API (another tenant's or user's
memories never) is tests/api/test_mcp.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from services.core.config import Settings
from services.core.errors import ConfigError
from services.mcp_server import ANY_USER_FLAG, ToolScope, build_server, tool_scope
from tests.mcp_client import ROOT, TOOLS, server_env

SCOPE_ARGS = {"tenant_id", "user_id"}


async def _arguments(settings: Settings) -> dict[str, set[str]]:
    return {t.name: set(t.input_schema["properties"]) for t in await build_server(settings).list_tools()}


async def test_a_bound_scope_leaves_tenant_and_user_out_of_every_tool_schema(tmp_path: Path) -> None:
    tools = await _arguments(Settings(data_dir=tmp_path, mcp_tenant="t", mcp_user="u"))
    assert set(tools) == TOOLS
    for name, arguments in tools.items():
        assert not arguments & SCOPE_ARGS, name
    assert "query" in tools["recall"]
    assert "memory_id" in tools["forget_memory"]


async def test_only_the_explicit_flag_lets_the_model_name_the_user(tmp_path: Path) -> None:
    anyone = await _arguments(Settings(data_dir=tmp_path, mcp_allow_any_user=True))
    assert all(arguments >= SCOPE_ARGS for arguments in anyone.values())
    in_tenant = await _arguments(Settings(data_dir=tmp_path, mcp_allow_any_user=True, mcp_tenant="t"))
    assert all("user_id" in a and "tenant_id" not in a for a in in_tenant.values())


@pytest.mark.parametrize("configured", [{}, {"mcp_tenant": "t"}, {"mcp_user": "u"}])
def test_without_a_bound_tenant_and_user_or_the_flag_there_is_no_server(
    configured: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=ANY_USER_FLAG):
        build_server(Settings.model_validate({"data_dir": tmp_path, **configured}))


def test_a_bound_scope_ignores_whatever_a_call_names() -> None:
    bound = ToolScope("t", "u")
    assert bound.of_call("other-tenant", "other-user") == ("t", "u")
    chosen = ToolScope("t", None, any_user=True)
    assert chosen.of_call("other-tenant", "v") == ("t", "v")
    assert ToolScope(None, None, any_user=True).of_call("t2", "v") == ("t2", "v")
    with pytest.raises(ToolError, match="no tenant"):
        ToolScope(None, None, any_user=True).of_call(None, "v")


def test_the_scope_comes_from_configuration() -> None:
    assert tool_scope(Settings(mcp_tenant="t", mcp_user="u")) == ToolScope("t", "u")


def _mcp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "services.cli", "mcp", *args]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def test_the_command_refuses_to_start_unbound_and_says_why(tmp_path: Path) -> None:
    env = server_env("http://127.0.0.1:1", tmp_path, "t", "u")
    del env["MEMSTREAM_MCP_USER"], env["MEMSTREAM_MCP_TENANT"]
    refused = _mcp(env)
    assert refused.returncode == 2
    assert "--tenant TENANT --user USER" in refused.stderr
    assert ANY_USER_FLAG in refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stdout == ""  # nothing on the protocol channel


def test_the_flags_bind_the_scope(tmp_path: Path) -> None:
    """`--tenant` / `--user` are enough: the server starts (and ends with its client, here an empty stdin)."""
    env = server_env("http://127.0.0.1:1", tmp_path, "t", "u")
    del env["MEMSTREAM_MCP_USER"], env["MEMSTREAM_MCP_TENANT"]
    started = _mcp(env, "--tenant", "t", "--user", "u")
    assert started.returncode == 0, started.stderr
    assert ANY_USER_FLAG not in started.stderr
