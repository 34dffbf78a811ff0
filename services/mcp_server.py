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

Whose memory a call reaches: the tenant and user the server was started for
(`--tenant` / `--user`, MEMSTREAM_MCP_TENANT / MEMSTREAM_MCP_USER). Bound,
they are not tool arguments at all, so nothing the model reads (a prompt
injection in a web page, a document, another user's message) can point a
tool at someone else's memories, whatever the key could reach: the stdio
default is this machine's operator key, which reaches every tenant. Only
`--allow-any-user` (MEMSTREAM_MCP_ALLOW_ANY_USER) lets the model name
`user_id` (and `tenant_id`, unless `--tenant` binds it) in each call; without
a bound tenant and user, or that flag, the server refuses to start.

An API error (401, 403, 404, 422, 503, ...) becomes a tool error carrying the
API's message and code, which the model can read and act on.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from memstream import APIError, AsyncClient, MemoryFilters, RecallOptions, TransportError
from schemas import MemoryStatus, MemoryType
from services.auth.client import client_key
from services.core.config import Settings
from services.core.errors import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")

SERVER_NAME = "memstream"
INSTRUCTIONS = (
    "Long-term memory of the user you are talking to. Call `recall` with what you are about to answer "
    "before answering anything that may depend on the user's past; `remember` what the user asks you to keep; "
    "`list_memories` and `forget_memory` when the user wants to see or remove what is kept."
)
TIMEOUT_SECONDS = 30.0

BOUND_INSTRUCTIONS = " Every tool acts for the one user this server was started for; none takes a user or tenant."
ANY_USER_FLAG = "--allow-any-user"
UNBOUND = (
    "memstream mcp needs the tenant and user its tools act for: --tenant TENANT --user USER "
    "(or MEMSTREAM_MCP_TENANT / MEMSTREAM_MCP_USER). Bound, they are not tool arguments, so nothing the model "
    f"reads can point a tool at another user's memories. {ANY_USER_FLAG} (MEMSTREAM_MCP_ALLOW_ANY_USER) lets the "
    "model name them in each call instead: then a prompt injection can read or delete the memories of any user "
    "the API key reaches (with an operator key, every tenant's)."
)
TENANT_ARG, USER_ARG = "tenant_id", "user_id"

TenantArg = Annotated[str | None, Field(description="Tenant; default: the server's --tenant")]
UserArg = Annotated[str | None, Field(description="User whose memory it is; default: the server's --user")]


@dataclass(frozen=True)
class ToolScope:
    """Whom the tools act for. What is bound is no tool argument: the model cannot name anything else."""

    tenant_id: str | None
    user_id: str | None
    # `--allow-any-user`: the model names user_id (and tenant_id unless bound) in each call.
    any_user: bool = False

    @property
    def hidden(self) -> frozenset[str]:
        """The tool arguments this scope does not offer."""
        if not self.any_user:
            return frozenset({TENANT_ARG, USER_ARG})
        return frozenset({TENANT_ARG}) if self.tenant_id is not None else frozenset()

    def of_call(self, tenant_id: str | None, user_id: str | None) -> tuple[str, str]:
        """(tenant, user) of a call: the bound ones, or with `--allow-any-user` what the call names."""
        tenant = tenant_id if TENANT_ARG not in self.hidden and tenant_id else self.tenant_id
        user = user_id if USER_ARG not in self.hidden and user_id else self.user_id
        if not tenant:
            raise ToolError("no tenant: pass tenant_id, or start the server with --tenant (MEMSTREAM_MCP_TENANT)")
        if not user:
            raise ToolError("no user: pass user_id, or start the server with --user (MEMSTREAM_MCP_USER)")
        return tenant, user


def tool_scope(settings: Settings) -> ToolScope:
    """The configured scope; ConfigError (UNBOUND) when neither bound nor explicitly left to the model."""
    if settings.mcp_allow_any_user:
        return ToolScope(settings.mcp_tenant or None, settings.mcp_user or None, any_user=True)
    if not settings.mcp_tenant or not settings.mcp_user:
        raise ConfigError(UNBOUND)
    return ToolScope(settings.mcp_tenant, settings.mcp_user)


Tool = Callable[..., Coroutine[Any, Any, Any]]


def offered(tool: Tool, hidden: frozenset[str]) -> Tool:
    """`tool` with the `hidden` parameters out of its signature, so out of the schema the MCP SDK derives from it.

    The SDK validates a call's arguments against that schema and passes only
    its fields, so a hidden parameter always keeps its default (None: the
    bound value) whatever a call sends.
    """
    if not hidden:
        return tool

    @functools.wraps(tool)
    async def bound(*args: Any, **kwargs: Any) -> Any:
        return await tool(*args, **{k: v for k, v in kwargs.items() if k not in hidden})

    sig = inspect.signature(tool, eval_str=True)
    bound.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.name not in hidden]
    )
    return bound


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
    """One client per tool call, with that call's key; an API error becomes the tool error the model reads.

    No retries: a tool answers at once, and the model (or the user) decides whether to try again.
    """

    def __init__(self, base_url: str, timeout: float = TIMEOUT_SECONDS) -> None:
        self.base_url = base_url
        self.timeout = timeout

    async def call(self, key: str, use: Callable[[AsyncClient], Awaitable[T]]) -> T:
        try:
            async with AsyncClient(self.base_url, api_key=key, timeout=self.timeout, retries=0) as client:
                return await use(client)
        except TransportError as exc:
            raise ToolError(f"memstream API not reachable at {self.base_url}: {exc}") from exc
        except APIError as exc:
            raise ToolError(_error_text(exc)) from exc


def _error_text(exc: APIError) -> str:
    return f"{exc.message} (HTTP {exc.status}, {exc.code})"


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
    """Raises ConfigError (UNBOUND) when no user is bound and `--allow-any-user` was not given."""
    scope = tool_scope(settings)
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

    # Logging is the CLI's (services/cli/app.py main, on stderr: stdout is the protocol).
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS + ("" if scope.any_user else BOUND_INSTRUCTIONS))

    def tool(description: str) -> Callable[[Tool], Tool]:
        def register(fn: Tool) -> Tool:
            server.add_tool(offered(fn, scope.hidden), name=fn.__name__, description=description)
            return fn

        return register

    @tool("What memory holds for the user about `query`, best first, ready for a prompt.")
    async def recall(
        ctx: Context[Any, Any],
        query: Annotated[str, Field(description="What you are about to answer, in the user's words")],
        tenant_id: TenantArg = None,
        user_id: UserArg = None,
        top_k: Annotated[int, Field(ge=1, le=100, description="Most memories to return")] = 10,
        session_id: Annotated[str | None, Field(description="The current session, if you know it")] = None,
    ) -> Recalled:
        tenant, user = scope.of_call(tenant_id, user_id)
        options: RecallOptions = {"top_k": top_k}
        if session_id:
            options["session_id"] = session_id
        found = await api.call(key_for(ctx), lambda c: c.recall(tenant, user, query, **options))
        return Recalled(prompt=found.prompt, memories=[_memory(m.model_dump()) for m in found.memories])

    @tool("The user's memories, oldest first; filter by type and status, page with offset.")
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
        tenant, user = scope.of_call(tenant_id, user_id)
        filters: MemoryFilters = {"limit": limit, "offset": offset}
        if type:
            filters["type"] = type.value
        if status:
            filters["status"] = status.value
        found = await api.call(key_for(ctx), lambda c: c.list_memories(tenant, user, **filters))
        return Listed(memories=[_memory(m.model_dump()) for m in found])

    @tool("Keep something about the user in long-term memory (goes through memstream's log).")
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
        tenant, user = scope.of_call(tenant_id, user_id)
        receipt = await api.call(key_for(ctx), lambda c: c.add_memory(tenant, user, text, type=type.value, wait=wait))
        return Command.model_validate(receipt.model_dump())

    @tool("Delete one memory of the user by id (from recall or list_memories).")
    async def forget_memory(
        ctx: Context[Any, Any],
        memory_id: Annotated[str, Field(description="The memory's id (a UUID)")],
        tenant_id: TenantArg = None,
        user_id: UserArg = None,
        wait: Annotated[bool, Field(description="Answer once the deletion is applied (else once accepted)")] = True,
    ) -> Command:
        tenant, user = scope.of_call(tenant_id, user_id)
        receipt = await api.call(key_for(ctx), lambda c: c.delete_memory(tenant, user, memory_id, wait=wait))
        return Command.model_validate(receipt.model_dump())

    return server


def run(settings: Settings, *, http: bool, host: str | None = None, port: int | None = None) -> None:
    """Blocks until the client disconnects (stdio) or the process is stopped (HTTP); ConfigError before serving."""
    server = build_server(settings)
    scope = tool_scope(settings)
    if scope.any_user:
        log.warning(
            "%s: the model names the user (and tenant%s) of every tool call; a prompt injection can reach any "
            "user this API key reaches",
            ANY_USER_FLAG,
            f" within {scope.tenant_id}" if scope.tenant_id else ", with an operator key any tenant",
        )
    if not http:
        server.run("stdio")
        return
    host, port = host or settings.mcp_host, port or settings.mcp_port
    log.info("MCP over streamable HTTP at http://%s:%d/mcp, calling %s", host, port, settings.api_base_url)
    server.run("streamable-http", host=host, port=port)
