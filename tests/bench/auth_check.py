"""What the API key check costs a request: the real dependency, in process, against the stack's Postgres.

Three figures, each per call to `services.api.auth.authenticate` on a real
Starlette request (`POST /v1/recall` with a JSON body, the shape of every
recall in the load stage):

- `off`: MEMSTREAM_AUTH=disabled, so what is left is reading the body and
  applying the role and tenant rules: the baseline;
- `cached`: a verified key within the cache TTL, what almost every request pays;
- `uncached`: the cache emptied before each call, so a Postgres lookup by hash
  (what a request pays once per key and TTL).

`on − off` is the key check itself; with the recall load stage's p50 (auth
on) it gives the share of a recall the check costs.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Message

from services.api.auth import AuthGate, authenticate, verifier_for
from services.core.config import Settings
from services.stores.postgres import PgPool
from tests.bench.probe import percentiles

_BODY = orjson.dumps({"tenant_id": "load", "user_id": "load-0001", "query": "what does the user like to drink?"})


def _request(app: FastAPI, key: str | None) -> Request:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode())]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/recall",
        "raw_path": b"/v1/recall",
        "query_string": b"",
        "headers": headers,
        "app": app,
    }
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": _BODY, "more_body": False}

    return Request(scope, receive)


async def _time(app: FastAPI, key: str | None, calls: int, before: Any = None) -> dict[str, float]:
    samples: list[float] = []
    for _ in range(calls):
        if before is not None:
            before()
        request = _request(app, key)
        started = time.perf_counter_ns()
        await authenticate(request)
        samples.append((time.perf_counter_ns() - started) / 1000)
    figures = percentiles(samples)
    return {**{f"{k}_us": v for k, v in figures.items()}, "mean_us": sum(samples) / len(samples)}


async def measure(settings: Settings, key: str, out: dict[str, Any], calls: int = 20_000) -> None:
    pool = PgPool(settings.pg_dsn, 1)
    await pool.open()
    try:
        verifier = verifier_for(settings, pool)
        on, off = FastAPI(), FastAPI()
        on.state.auth, off.state.auth = AuthGate(verifier), AuthGate(None)
        await _time(on, key, 100)  # warm: the key is cached, the code paths are hot
        await _time(off, None, 100)
        for name, figures in (
            ("off", await _time(off, None, calls)),
            ("cached", await _time(on, key, calls)),
            ("uncached", await _time(on, key, 200, before=verifier.forget_cached)),
        ):
            out.update({f"{name}_{k}": v for k, v in figures.items()})
        out["check_cost_us"] = out["cached_mean_us"] - out["off_mean_us"]
        out["cache_ttl_seconds"] = verifier.ttl
        await verifier.flush()
    finally:
        await pool.close()
