"""`memstream mcp`: a user's memory as MCP tools (recall, remember, list_memories, forget_memory).

A thin client of memstream's HTTP API (`Settings.api_base_url`): every tool
call is one request through the same routes, key checks and tenant binding
as any other client's, so this process holds no store connection and no
privilege of its own, and runs wherever the assistant does.

Whose key a call carries:
- over stdio, the client started this process for itself: the key from the
  environment (MEMSTREAM_API_KEY, else data_dir/api-key);
- over streamable HTTP (`--http`), each client sends its own
  `Authorization: Bearer <key>`, forwarded as is, so the port never lends
  this machine's (operator) key to whoever reaches it.

An API error (401, 403, 404, 422, 503, ...) becomes a tool error carrying the
API's message and code, which the model can read and act on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from schemas import MemoryStatus, MemoryType
from services.auth.client import client_key
from services.config import Settings

log = logging.getLogger(__name__)

SERVER_NAME = "memstream"
INSTRUCTIONS = (
    "Long-term memory of the user you are talking to. Call `recall` with what you are about to answer "
    "before answering anything that may depend on the user's past; `remember` what the user asks you to keep; "
    "`list_memories` and `forget_memory` when the user wants to see or remove what is kept."
)
TIMEOUT_SECONDS = 30.0

TenantArg = Annotated[
    str | None, Field(description="Tenant; default: MEMSTREAM_MCP_TENANT of the server's environment")
]
UserArg = Annotated[str | None, Field(description="User whose memory it is; default: MEMSTREAM_MCP_USER")]


class Memory(BaseModel):
    """What a model needs of a memory; the HTTP API has the rest (provenance, signals, history)."""

    id: str
    type: str
    text: str
    observed_at: datetime
    status: str | None = None
    score: float | None = None


class Recalled(BaseModel):
    prompt: str = Field(description="The memories packed for a system prompt, best first")
    memories: list[Memory]


class Listed(BaseModel):
    memories: list[Memory]


class Command(BaseModel):
    """The API's receipt for a write, which goes through memstream's log."""

    command_id: str
    status: Literal["accepted", "applied"] = Field(
        description="applied: readable now; accepted: in the log, applied within moments"
    )
    memory_id: str | None = Field(default=None, description="remember: the new memory's id")


class MemstreamApi:
    """One HTTP call per tool call; the error body's `{"error": {"code", "message"}}` becomes the tool error."""

    def __init__(self, base_url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.base_url = base_url
        self.timeout = timeout

    async def call(
        self,
        key: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        headers = {"authorization": f"Bearer {key}"}
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in (params or {}).items()}
        try:
            async with httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout) as client:
                response = await client.request(method, path, params=query, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise ToolError(f"memstream API not reachable at {self.base_url}: {exc!r}") from exc
        if response.status_code >= 400:
            raise ToolError(_error_text(response))
        return response.json()


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:500] or response.reason_phrase
    return f"{message} (HTTP {response.status_code}, {code})"


def _memory(found: Mapping[str, Any]) -> Memory:
    return Memory(
        id=found["id"],
        type=found["type"],
        text=found["text"],
        observed_at=found["observed_at"],
        status=found.get("status"),
        score=found.get("score"),
    )


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, key = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return key.strip() or None


def build_server(settings: Settings) -> MCPServer:
    api = MemstreamApi(settings.api_base_url)
    own_key = client_key(settings)

    def key_for(ctx: Context[Any, Any]) -> str:
        headers = ctx.headers
        key = own_key if headers is None else _bearer(headers)
        if key:
            return key
        if headers is None:
            raise ToolError("no API key: set MEMSTREAM_API_KEY (memstream keys create) or run `memstream up` here")
        raise ToolError("no API key: send `Authorization: Bearer <memstream API key>` to this MCP endpoint")

    def scope(tenant_id: str | None, user_id: str | None) -> tuple[str, str]:
        tenant, user = tenant_id or settings.mcp_tenant, user_id or settings.mcp_user
        if not tenant:
            raise ToolError("no tenant: pass tenant_id, or start the server with MEMSTREAM_MCP_TENANT")
        if not user:
            raise ToolError("no user: pass user_id, or start the server with MEMSTREAM_MCP_USER")
        return tenant, user

    # Logging is the CLI's (services/cli.py main, on stderr: stdout is the protocol).
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)

    @server.tool(description="What memory holds for the user about `query`, best first, ready for a prompt.")
    async def recall(
        ctx: Context[Any, Any],
        query: Annotated[str, Field(description="What you are about to answer, in the user's words")],
        tenant_id: TenantArg = None,
        user_id: UserArg = None,
        top_k: Annotated[int, Field(ge=1, le=100, description="Most memories to return")] = 10,
        session_id: Annotated[str | None, Field(description="The current session, if you know it")] = None,
    ) -> Recalled:
        tenant, user = scope(tenant_id, user_id)
        body: dict[str, Any] = {"tenant_id": tenant, "user_id": user, "query": query, "top_k": top_k}
        if session_id:
            body["session_id"] = session_id
        found = await api.call(key_for(ctx), "POST", "/v1/recall", body=body)
        return Recalled(prompt=found["prompt"], memories=[_memory(m) for m in found["memories"]])

    @server.tool(description="The user's memories, oldest first; filter by type and status, page with offset.")
    async def list_memories(
        ctx: Context[Any, Any],
        tenant_id: TenantArg = None,
        user_id: UserArg = None,
        type: Annotated[MemoryType | None, Field(description="Only this type")] = None,
        status: Annotated[
            MemoryStatus | None, Field(description="Only this status; null for every one, history included")
        ] = MemoryStatus.ACTIVE,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> Listed:
        tenant, user = scope(tenant_id, user_id)
        params: dict[str, str | int | bool] = {"tenant_id": tenant, "limit": limit, "offset": offset}
        params.update({k: v for k, v in (("type", type), ("status", status)) if v})
        found = await api.call(key_for(ctx), "GET", f"/v1/users/{_segment(user)}/memories", params=params)
        return Listed(memories=[_memory(m) for m in found["memories"]])

    @server.tool(description="Keep something about the user in long-term memory (goes through memstream's log).")
    async def remember(
        ctx: Context[Any, Any],
        text: Annotated[str, Field(description="The memory, as a self-contained sentence about the user")],
        type: Annotated[
            MemoryType, Field(description="fact (what is true of the user) or preference (how to act for them)")
        ] = MemoryType.FACT,
        tenant_id: TenantArg = None,
        user_id: UserArg = None,
        wait: Annotated[bool, Field(description="Answer once the memory is readable (else once accepted)")] = True,
    ) -> Command:
        tenant, user = scope(tenant_id, user_id)
        body = {"tenant_id": tenant, "text": text, "type": type}
        path = f"/v1/users/{_segment(user)}/memories"
        answer = await api.call(key_for(ctx), "POST", path, params={"wait": wait}, body=body)
        return Command.model_validate(answer)

    @server.tool(description="Delete one memory of the user by id (from recall or list_memories).")
    async def forget_memory(
        ctx: Context[Any, Any],
        memory_id: Annotated[str, Field(description="The memory's id (a UUID)")],
        tenant_id: TenantArg = None,
        user_id: UserArg = None,
        wait: Annotated[bool, Field(description="Answer once the deletion is applied (else once accepted)")] = True,
    ) -> Command:
        tenant, user = scope(tenant_id, user_id)
        path = f"/v1/users/{_segment(user)}/memories/{_segment(memory_id)}"
        answer = await api.call(key_for(ctx), "DELETE", path, params={"tenant_id": tenant, "wait": wait})
        return Command.model_validate(answer)

    return server


def _segment(value: str) -> str:
    """One path segment: a '/', '?' or '..' in an id must not reach another route (the API then refuses the id).

    Dots too: httpx drops a `.` or `..` segment before sending; `%2E` survives and the server decodes it.
    """
    return quote(value, safe="").replace(".", "%2E")


def run(settings: Settings, *, http: bool, host: str | None = None, port: int | None = None) -> None:
    """Blocks until the client disconnects (stdio) or the process is stopped (HTTP)."""
    server = build_server(settings)
    if not http:
        server.run("stdio")
        return
    host, port = host or settings.mcp_host, port or settings.mcp_port
    log.info("MCP over streamable HTTP at http://%s:%d/mcp, calling %s", host, port, settings.api_base_url)
    server.run("streamable-http", host=host, port=port)
