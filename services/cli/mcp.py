"""`memstream mcp`: the command line of services/mcp_server.py, which is imported only when the command runs."""

from __future__ import annotations

import argparse
import sys

from services.core.config import Settings
from services.core.errors import ConfigError


def _cmd_mcp(settings: Settings, args: argparse.Namespace) -> int:
    from services.mcp_server import run

    given = {"mcp_tenant": args.tenant, "mcp_user": args.user, "mcp_allow_any_user": args.allow_any_user or None}
    settings = settings.model_copy(update={k: v for k, v in given.items() if v is not None})
    try:
        run(settings, http=args.http, host=args.host, port=args.port)
    except ConfigError as exc:
        print(f"memstream mcp: {exc}", file=sys.stderr)
        return 2
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    mcp = sub.add_parser(
        "mcp",
        help="serve memory to MCP clients (recall, remember, list_memories, forget_memory)",
        description="An MCP server over memstream's HTTP API (MEMSTREAM_API_URL, default the local read service). "
        "Over stdio (the default) it calls the API with MEMSTREAM_API_KEY, else the key in data_dir/api-key; "
        "with --http each MCP client must send its own `Authorization: Bearer <key>`. Every tool acts for the "
        "--tenant and --user given here, which are not tool arguments: the model cannot name another user.",
    )
    mcp.add_argument("--tenant", default=None, help="tenant the tools act for (default: MEMSTREAM_MCP_TENANT)")
    mcp.add_argument("--user", default=None, help="user the tools act for (default: MEMSTREAM_MCP_USER)")
    mcp.add_argument(
        "--allow-any-user",
        action="store_true",
        help="DANGEROUS: let the model name user_id (and tenant_id, unless --tenant) in each call, so a prompt "
        "injection can read or delete the memories of any user the API key reaches (an operator key: every "
        "tenant's). Default: MEMSTREAM_MCP_ALLOW_ANY_USER, off",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    mcp.add_argument("--host", default=None, help="with --http: address to listen on (default: MEMSTREAM_MCP_HOST)")
    mcp.add_argument("--port", type=int, default=None, help="with --http: port (default: MEMSTREAM_MCP_PORT, 8765)")
    mcp.set_defaults(func=_cmd_mcp)
