"""FastAPI application factory. Every memory route takes tenant and user."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas import MemoryStatus, MemoryType
from services import metrics
from services.api.health import Readiness
from services.api.models import History, MemoryList, RecallRequest, RecallResponse, WorkingWindow
from services.api.ranking import Weights
from services.api.recall import recall, working
from services.errors import StoreError
from services.runtime import Runtime

TenantQ = Annotated[str, Query(min_length=1, max_length=200, description="Tenant that owns the memory")]
UserQ = Annotated[str, Query(min_length=1, max_length=200)]


def create_app(rt: Runtime, readiness: Readiness) -> FastAPI:
    app = FastAPI(title="memstream", version="0.1.0")
    weights = Weights()

    @app.middleware("http")
    async def count_requests(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        route = request.scope.get("route")
        metrics.HTTP_REQUESTS.labels(route=getattr(route, "path", "unmatched"), status=str(response.status_code)).inc()
        return response

    @app.exception_handler(StoreError)
    async def store_unavailable(_: Request, exc: StoreError) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    @app.post("/v1/recall", response_model=RecallResponse)
    async def recall_route(body: RecallRequest) -> RecallResponse:
        started = time.perf_counter()
        try:
            return await recall(rt, body, weights)
        finally:
            metrics.RECALL_LATENCY.observe(time.perf_counter() - started)

    @app.get("/v1/users/{user_id}/memories", response_model=MemoryList)
    async def list_memories(
        user_id: str,
        tenant_id: TenantQ,
        type: MemoryType | None = None,
        status: MemoryStatus | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> MemoryList:
        found = await rt.pg.list_memories(tenant_id, user_id, type_=type, status=status, limit=limit, offset=offset)
        return MemoryList(memories=found)

    @app.get("/v1/users/{user_id}/memories/{memory_id}/history", response_model=History)
    async def history(user_id: str, memory_id: str, tenant_id: TenantQ) -> History:
        chain = await rt.pg.history(tenant_id, user_id, memory_id)
        if not chain:
            raise HTTPException(status_code=404, detail=f"no memory {memory_id} for this tenant and user")
        return History(memory_id=memory_id, chain=chain)

    @app.get("/v1/sessions/{session_id}/working", response_model=WorkingWindow)
    async def working_route(session_id: str, tenant_id: TenantQ, user_id: UserQ) -> WorkingWindow:
        window = await working(rt, tenant_id, user_id, session_id)
        if window is None:
            raise HTTPException(status_code=404, detail=f"no session {session_id} for this tenant and user")
        return window

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await readiness.check()
        ok = all(checks.values())
        return JSONResponse(status_code=200 if ok else 503, content={"ready": ok, "checks": checks})

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
