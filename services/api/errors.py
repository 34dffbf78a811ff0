"""Error responses: bad input is a 4xx, an outage a 503, a bug a 500.

Bodies are always `{"detail": ...}` and never carry a driver's or a stack
trace's words: those go to the log under the request id, which the client
also gets in the `x-request-id` header to quote in a bug report.

| what | status | detail |
|---|---|---|
| a field, path or query parameter that fails validation (NUL or control characters, ':' or whitespace in an id, id > 200 chars, memory id not a UUID, numbers out of range or of the wrong type, unknown body field, missing body) | 422 | FastAPI's list of `{type, loc, msg}`, without `input`/`ctx` |
| a body that is not strict JSON: syntax, NaN/Infinity, lone surrogates, nesting > 1024, a BOM | 422 | `[{type: "json_invalid", loc: ["body", offset], msg}]` |
| a body whose Content-Type is not JSON (or missing) | 415 | text |
| a body over `http_max_body_bytes` | 413 | text |
| unknown route / method | 404 / 405 | text |
| StoreRejected (the store refused this data) | 422 | generic |
| StoreUnavailable, an unclassified StoreError, a `/v1` request over `http_request_timeout` | 503 + Retry-After | generic |
| anything else | 500 | generic |
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import Scope

from services.errors import StoreError, StoreRejected, StoreUnavailable

log = logging.getLogger(__name__)

REQUEST_ID_KEY = "memstream.request_id"
REQUEST_ID_HEADER = "x-request-id"
# What a client should wait before retrying after a 503: about one store
# connect/pool timeout, so the retry meets a store that had time to come back.
RETRY_AFTER_SECONDS = 2

UNAVAILABLE = "service temporarily unavailable, retry later"
REJECTED = "the request's data was rejected by the store"
INTERNAL = "internal server error"

# A validation answer names the fields; it must not become an echo chamber.
_MAX_ERRORS = 20
_MAX_TEXT = 120


def request_id(scope: Scope) -> str:
    return str(scope.get(REQUEST_ID_KEY, "-"))


def error_response(status: int, detail: Any, *, retry_after: bool = False) -> JSONResponse:
    headers = {"retry-after": str(RETRY_AFTER_SECONDS)} if retry_after else None
    return JSONResponse(status_code=status, content={"detail": detail}, headers=headers)


def unavailable() -> JSONResponse:
    return error_response(503, UNAVAILABLE, retry_after=True)


def _clip(text: str) -> str:
    """Short, and encodable: a lone surrogate would make the JSON encoder itself fail."""
    if len(text) > _MAX_TEXT:
        text = text[:_MAX_TEXT] + "…"
    return text.encode("utf-8", "replace").decode("utf-8")


def public_errors(errors: Any) -> list[dict[str, Any]]:
    """Validation errors without `input` and `ctx`, which echo what the client sent (maybe 1 MiB of it)."""
    out: list[dict[str, Any]] = []
    for err in list(errors)[:_MAX_ERRORS]:
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "json_invalid":
            msg = f"invalid JSON: {err.get('ctx', {}).get('error', 'cannot parse')}"
        loc = [part if isinstance(part, int) else _clip(str(part)) for part in err.get("loc", ())]
        out.append({"type": _clip(str(err.get("type", "invalid"))), "loc": loc, "msg": _clip(msg)})
    return out


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, public_errors(exc.errors()))


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("request %s: store unavailable: %s", request_id(request.scope), exc)
    return unavailable()


async def _store_rejected(request: Request, exc: Exception) -> JSONResponse:
    log.warning("request %s: store rejected the request's data: %s", request_id(request.scope), exc)
    return error_response(422, REJECTED)


def install(app: FastAPI) -> None:
    """Handlers for what routes raise; a bare StoreError (unclassified) is treated as an outage."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StoreUnavailable, _store_unavailable)
    app.add_exception_handler(StoreRejected, _store_rejected)
    app.add_exception_handler(StoreError, _store_unavailable)
