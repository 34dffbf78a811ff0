"""Error responses: bad input is a 4xx, an outage a 503, a bug a 500, all in one shape.

Every error body, whoever produces it (a route, FastAPI's validation, the
router's 404/405, the middlewares' 413/503/500), is

    {"error": {"code": "<stable token>", "message": "<for a human>", "details": [...]?}}

so a client branches on `error.code` alone. Bodies never carry a driver's
or a stack trace's words: those go to the log under the request id, which
the client also gets in the `x-request-id` header to quote in a bug report.

| what | status | code |
|---|---|---|
| a field, path or query parameter that fails validation (NUL or control characters, ':' or whitespace in an id, id > 200 chars, memory id not a UUID, numbers out of range or of the wrong type, unknown body field, missing body) | 422 | `validation_error`, `details`: `[{type, loc, msg}]` without `input`/`ctx` |
| a body that is not strict JSON: syntax, NaN/Infinity, lone surrogates, nesting > 1024, a BOM | 422 | `validation_error`, `details`: `[{type: "json_invalid", loc: ["body", offset], msg}]` |
| a body whose Content-Type is not JSON (or missing) | 415 | `unsupported_media_type` |
| a body over `http_max_body_bytes` | 413 | `body_too_large` |
| no or an unknown API key / a key of another tenant or too small a role | 401 / 403 | `unauthorized` / `forbidden` |
| unknown route or record / method | 404 / 405 | `not_found` / `method_not_allowed` |
| StoreRejected (the store refused this data) | 422 | `rejected` |
| StoreUnavailable, an unclassified StoreError, a `/v1` request over `http_request_timeout` | 503 + Retry-After | `unavailable` |
| anything else | 500 | `internal_error` |

A route picks its own code by raising `HTTPException(status, detail={"code": ..., "message": ...})`;
a plain string detail gets the status's code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from services.core.errors import StoreError, StoreRejected, StoreUnavailable

log = logging.getLogger(__name__)

REQUEST_ID_KEY = "memstream.request_id"
REQUEST_ID_HEADER = "x-request-id"
REPLICA_HEADER = "x-memstream-replica"
# What a client should wait before retrying after a 503: about one store
# connect/pool timeout, so the retry meets a store that had time to come back.
RETRY_AFTER_SECONDS = 2

UNAVAILABLE = "service temporarily unavailable, retry later"
REJECTED = "the request's data was rejected by the store"
INTERNAL = "internal server error"

# A validation answer names the fields; it must not become an echo chamber.
_MAX_ERRORS = 20
_MAX_TEXT = 120
# A route's own message may quote an id (200 characters at most) in a sentence.
_MAX_MESSAGE = 1000

CODES: Mapping[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
    504: "timeout",
}


# The store refused the data (422): not the client's field, nothing to point at.
REJECTED_CODE = "rejected"


def code_for(status: int) -> str:
    return CODES.get(status, f"http_{status}")


class FieldError(BaseModel):
    type: str = Field(description="Pydantic's error type, e.g. `missing`, `string_too_long`, `json_invalid`")
    loc: list[str | int] = Field(description="Where: `body`, `query`, `path` or `header`, then the field")
    msg: str = Field(description="What is wrong, without echoing the value")


class ErrorInfo(BaseModel):
    code: str = Field(
        description="Stable machine-readable token: "
        + ", ".join(f"`{c}`" for c in sorted({*CODES.values(), REJECTED_CODE}))
        + "; a route may name a more specific one",
        examples=["not_found"],
    )
    message: str = Field(description="For a human; never a driver's or a stack trace's words")
    details: list[FieldError] | None = Field(default=None, description="Per-field problems, on `validation_error`")


class ErrorBody(BaseModel):
    """The one error shape of every route."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"error": {"code": "not_found", "message": "no memory 0e5c2d6e-… for this tenant and user"}},
                {
                    "error": {
                        "code": "validation_error",
                        "message": "body.tenant_id: Field required",
                        "details": [{"type": "missing", "loc": ["body", "tenant_id"], "msg": "Field required"}],
                    }
                },
            ]
        }
    )

    error: ErrorInfo


def request_id(scope: Scope) -> str:
    return str(scope.get(REQUEST_ID_KEY, "-"))


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: list[dict[str, Any]] | None = None,
    retry_after: bool = False,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    error: dict[str, Any] = {"code": code or code_for(status), "message": message}
    if details is not None:
        error["details"] = details
    all_headers = dict(headers or {})
    if retry_after:
        all_headers["retry-after"] = str(RETRY_AFTER_SECONDS)
    return JSONResponse(status_code=status, content={"error": error}, headers=all_headers or None)


def unavailable() -> JSONResponse:
    return error_response(503, UNAVAILABLE, retry_after=True)


def _clip(text: str, limit: int = _MAX_TEXT) -> str:
    """Short, and encodable: a lone surrogate would make the JSON encoder itself fail."""
    if len(text) > limit:
        text = text[:limit] + "…"
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


def _summary(details: list[dict[str, Any]]) -> str:
    """The first problem in words, so a client that only prints `message` still says which field."""
    if not details:
        return "invalid request"
    first = details[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return f"{where}: {first['msg']}{more}" if where else f"{first['msg']}{more}"


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = public_errors(exc.errors())
    return error_response(422, _summary(details), details=details)


async def _http_exception(_: Request, exc: Exception) -> JSONResponse:
    """Routes' HTTPExceptions and the router's own 404/405, in the one shape; their headers (Allow, WWW-Authenticate) kept."""
    assert isinstance(exc, StarletteHTTPException)
    detail: Any = exc.detail
    code: str | None = None
    if isinstance(detail, Mapping) and "message" in detail:
        code = str(detail.get("code") or code_for(exc.status_code))
        detail = detail["message"]
    return error_response(exc.status_code, _clip(str(detail), _MAX_MESSAGE), code=code, headers=exc.headers)


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("request %s: store unavailable: %s", request_id(request.scope), exc)
    return unavailable()


async def _store_rejected(request: Request, exc: Exception) -> JSONResponse:
    log.warning("request %s: store rejected the request's data: %s", request_id(request.scope), exc)
    return error_response(422, REJECTED, code=REJECTED_CODE)


# What any `/v1` operation may answer besides its own codes; bodies add 413 and 415.
_DESCRIPTIONS: Mapping[int, str] = {
    401: "No API key, or an unknown or revoked one (`unauthorized`)",
    403: "The key's tenant or role does not allow this request (`forbidden`)",
    404: "No such record for this tenant and user (`not_found`)",
    409: "Conflicts with the current state (`conflict`)",
    413: "Request body over the configured limit (`body_too_large`)",
    415: "Request body is not JSON (`unsupported_media_type`)",
    422: "A field, path or query parameter failed validation (`validation_error`, with `details`), "
    "or the store refused the data (`rejected`)",
    500: "A bug; the log has the details under the `x-request-id` (`internal_error`)",
    503: "A store is down or the request took too long; retry after `Retry-After` seconds (`unavailable`)",
}
_COMMON = (401, 403, 422, 500, 503)
_WITH_BODY = (413, 415)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route decorator: its own error statuses (e.g. 404), documented with `ErrorBody`."""
    return {
        status: {"model": ErrorBody, "description": _DESCRIPTIONS.get(status, code_for(status))} for status in statuses
    }


def _error_ref(schemas: dict[str, Any]) -> dict[str, Any]:
    """`ErrorBody` and its parts among the components, whether or not a route already declared it."""
    schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in schema.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    schemas.setdefault("ErrorBody", schema)
    return {"$ref": "#/components/schemas/ErrorBody"}


def document_errors(spec: dict[str, Any], prefix: str = "/v1/") -> dict[str, Any]:
    """Every `/v1` operation documents the errors any of them can answer, in `ErrorBody`.

    Done over the finished document rather than per decorator so a route
    added later cannot forget them. FastAPI's own `HTTPValidationError` (a
    shape this service never sends) is replaced by `ErrorBody` everywhere.
    """
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    ref = _error_ref(schemas)
    for path, item in spec.get("paths", {}).items():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            answers = operation["responses"]
            statuses: tuple[int, ...] = ()
            if path.startswith(prefix):
                statuses = _COMMON + (_WITH_BODY if "requestBody" in operation else ())
            elif "422" in answers:
                statuses = (422,)
            for status in statuses:
                answer = answers.setdefault(str(status), {"description": _DESCRIPTIONS[status]})
                if status == 422:
                    answer["description"] = _DESCRIPTIONS[422]
                answer["content"] = {"application/json": {"schema": ref}}
    for name in ("HTTPValidationError", "ValidationError"):  # the second is referenced only by the first
        if f'"#/components/schemas/{name}"' not in json.dumps(spec):
            schemas.pop(name, None)
    return spec


def install(app: FastAPI) -> None:
    """Handlers for what routes raise (a bare StoreError, unclassified, is treated as an outage), and the documentation of them."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(StoreUnavailable, _store_unavailable)
    app.add_exception_handler(StoreRejected, _store_rejected)
    app.add_exception_handler(StoreError, _store_unavailable)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_errors(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
