"""`memstream mcp`: the command line of services/mcp_server.py, which is imported only when the command runs."""

from __future__ import annotations

import argparse

from services.config import Settings


def _cmd_mcp(settings: Settings, args: argparse.Namespace) -> int:
    from services.mcp_server import run

    run(settings, http=args.http, host=args.host, port=args.port)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sub` is the `memstream` parser's subparsers object."""
    mcp = sub.add_parser(
        "mcp",
        help="serve memory to MCP clients (recall, remember, list_memories, forget_memory)",
        description="An MCP server over memstream's HTTP API (MEMSTREAM_API_URL, default the local read service). "
        "Over stdio (the default) it calls the API with MEMSTREAM_API_KEY, else the key in data_dir/api-key; "
        "with --http each MCP client must send its own `Authorization: Bearer <key>`. Tools act for "
        "MEMSTREAM_MCP_TENANT / MEMSTREAM_MCP_USER unless a call names its tenant_id / user_id.",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    mcp.add_argument("--host", default=None, help="with --http: address to listen on (default: MEMSTREAM_MCP_HOST)")
    mcp.add_argument("--port", type=int, default=None, help="with --http: port (default: MEMSTREAM_MCP_PORT, 8765)")
    mcp.set_defaults(func=_cmd_mcp)
