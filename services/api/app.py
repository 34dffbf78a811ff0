"""FastAPI application factory. Every memory route takes tenant and user.

Layers, outermost first: RequestContext (request id, counts, last-resort
500) → KeyFirst (/v1 only, 401 before the body is read) → BodyLimit (413)
→ Deadline (/v1 only, 503) → FastAPI's exception handlers
(services/api/errors.py) → routes, whose bodies are strict JSON
(services/api/jsonbody.py) and whose ids are checked (services/api/models.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import Scope

from services.api import docs, errors
from services.api.access import AccessMarks, kafka_producer
from services.api.auth import install as install_auth
from services.api.change_stream import change_router
from services.api.command_routes import command_router
from services.api.command_submit import CommandSubmitter, PeersReached
from services.api.health import Readiness
from services.api.ingest import router as ingest_router
from services.api.jsonbody import StrictJsonRoute
from services.api.key_routes import key_router
from services.api.limits import BodyLimit, Deadline, KeyFirst, RequestContext, request_budget
from services.api.models import (
    Health,
    History,
    MemoryIdPath,
    ReadyStatus,
    RecallRequest,
    RecallResponse,
    SessionPath,
    TenantQ,
    UserPath,
    UserQ,
    WorkingWindow,
)
from services.api.ops_routes import ops_router
from services.api.ranking import Weights
from services.api.read_gate import ReadGate
from services.api.recall import recall, working
from services.api.transfer_routes import transfer_router
from services.api.user_routes import user_router
from services.core import backlog, metrics
from services.runtime import Runtime
from services.stores.postgres.commands import CommandStore

CONSOLE_DIR = Path(__file__).with_name("console")
# The console's scripts come from here only, nothing inline, and no page may frame it.
CONSOLE_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


class ConsoleFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(CONSOLE_HEADERS)
        return response


def create_app(
    rt: Runtime, readiness: Readiness, marks: AccessMarks | None = None, peers: PeersReached | None = None
) -> FastAPI:
    """`marks` defaults to a Kafka producer on `memory.commands`, started by the first recall, one window of
    marks every `access_flush_seconds`. `peers`: on a read replica, what `?wait=true` also waits for
    (services/api/replica.py).

    It stops with the app's lifespan when the server runs one; with
    `lifespan="off"` its task ends with the event loop (marks are best effort).
    """
    settings = rt.settings
    access = marks or AccessMarks(lambda: kafka_producer(settings), flush_seconds=settings.access_flush_seconds)
    # The commands stage's bookkeeping, read by the routes (what a user holds) and by `?wait=true`.
    command_store = CommandStore()
    # One producer on memory.commands for every command route (commands, import), started by the first command.
    commands = CommandSubmitter(rt, command_store, peers)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await access.close()
        await commands.close()

    app = FastAPI(
        title="memstream", version="0.1.0", description=docs.DESCRIPTION, openapi_tags=docs.TAGS, lifespan=lifespan
    )
    app.state.access_marks = access
    app.router.route_class = StrictJsonRoute
    errors.install(app)
    gate = install_auth(app, settings, rt.pg)  # before any route: every /v1 route needs an API key
    # add_middleware puts each new layer outside the previous ones.
    app.add_middleware(
        Deadline,
        seconds=settings.http_request_timeout,
        budget=lambda scope: request_budget(
            scope,
            settings.http_request_timeout,
            settings.command_wait_timeout,
            settings.http_transfer_timeout,
            settings.http_ops_timeout,
        ),
    )
    app.add_middleware(BodyLimit, max_bytes=settings.http_max_body_bytes)
    app.add_middleware(KeyFirst, gate=gate, seconds=settings.http_request_timeout)
    app.add_middleware(RequestContext, replica=settings.replica_name)
    weights = Weights.from_settings(settings)
    reads = ReadGate(
        backlog.STAGES, settings.ingest_behind_seconds, settings.read_share_floor, settings.read_gate_max_wait
    )
    app.include_router(ingest_router(settings))
    app.include_router(command_router(rt, commands, command_store))
    app.include_router(transfer_router(rt, commands))
    app.include_router(user_router(rt))
    app.include_router(key_router(rt))
    app.include_router(ops_router(rt))
    app.include_router(change_router(rt))

    @app.post(
        "/v1/recall",
        response_model=RecallResponse,
        tags=[docs.RECALL],
        summary="Recall what memory holds for a user, ranked and packed into a token budget",
    )
    async def recall_route(body: RecallRequest) -> RecallResponse:
        started = time.perf_counter()
        try:
            async with reads.admit():
                return await recall(rt, body, weights, access)
        finally:
            metrics.RECALL_LATENCY.observe(time.perf_counter() - started)

    @app.get(
        "/v1/users/{user_id}/memories/{memory_id}/history",
        response_model=History,
        tags=[docs.MEMORIES],
        summary="A memory's versions: what it superseded and what superseded it",
        responses=errors.responses(404),
    )
    async def history(user_id: UserPath, memory_id: MemoryIdPath, tenant_id: TenantQ) -> History:
        chain = await rt.reads.history(tenant_id, user_id, memory_id)
        if not chain:
            raise HTTPException(status_code=404, detail=f"no memory {memory_id} for this tenant and user")
        return History(memory_id=memory_id, chain=chain)

    @app.get(
        "/v1/sessions/{session_id}/working",
        response_model=WorkingWindow,
        tags=[docs.SESSIONS],
        summary="A session's working window: its recent turns",
        responses=errors.responses(404),
    )
    async def working_route(session_id: SessionPath, tenant_id: TenantQ, user_id: UserQ) -> WorkingWindow:
        window = await working(rt, tenant_id, user_id, session_id)
        if window is None:
            raise HTTPException(status_code=404, detail=f"no session {session_id} for this tenant and user")
        return window

    # The console: static files only, outside /v1 (the page holds no data; every read it makes sends the key).
    app.mount("/console", ConsoleFiles(directory=CONSOLE_DIR, html=True), name="console")

    @app.get("/healthz", response_model=Health, tags=[docs.OPERATIONS], summary="Liveness: the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        response_model=ReadyStatus,
        tags=[docs.OPERATIONS],
        summary="Readiness: Kafka, Postgres and the index answer",
        responses={503: {"model": ReadyStatus, "description": "A dependency did not answer in time"}},
    )
    async def readyz() -> JSONResponse:
        checks = await readiness.check()
        ok = all(checks.values())
        body = {"ready": ok, "checks": checks, **readiness.report()}  # + the serving generation
        return JSONResponse(status_code=200 if ok else 503, content=body)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=[docs.OPERATIONS],
        summary="Prometheus metrics (text exposition format)",
    )
    async def metrics_route() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
