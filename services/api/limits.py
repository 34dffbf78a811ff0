"""Pure ASGI middleware: request ids and the last-resort 500, the key before the body, the body cap, the
per-request deadline.

Pure ASGI rather than `@app.middleware("http")`: these must see every
message, answer before the app has read anything (401, 413) and walk away
from a handler stuck on a store (503) without waiting for it to unwind.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from urllib.parse import parse_qs

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.auth import AuthGate, protected
from services.api.errors import (
    INTERNAL,
    REPLICA_HEADER,
    REQUEST_ID_HEADER,
    REQUEST_ID_KEY,
    UNAVAILABLE,
    error_response,
    request_id,
    unavailable,
)
from services.auth.keys import Principal
from services.core import metrics
from services.core.errors import StoreError

log = logging.getLogger(__name__)

_CLIENT_ID = re.compile(rb"[A-Za-z0-9._-]{1,64}")


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


class RequestContext:
    """Outermost layer: every response gets `x-request-id`, is counted by route, and no exception escapes.

    A client's own `x-request-id` is kept when it is a short token, so one id
    can follow a request across services; anything else is replaced.
    """

    def __init__(self, app: ASGIApp, replica: str | None = None) -> None:
        self.app = app
        # A read replica names itself on every answer: replicas share a port, and an operator must know which spoke.
        self._extra = [] if replica is None else [(REPLICA_HEADER.encode(), replica.encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = _header(scope, REQUEST_ID_HEADER.encode())
        rid = offered.decode() if offered and _CLIENT_ID.fullmatch(offered) else uuid.uuid4().hex
        scope[REQUEST_ID_KEY] = rid
        status: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [*message.get("headers", ()), (REQUEST_ID_HEADER.encode(), rid.encode()), *self._extra]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("request %s (%s %r) failed", rid, scope.get("method"), scope.get("path"))
            if status is None:
                await error_response(500, INTERNAL)(scope, receive, send_with_id)
        finally:
            if status is not None:
                route = getattr(scope.get("route"), "path", "unmatched")
                metrics.HTTP_REQUESTS.labels(route=route, status=str(status)).inc()


def _announces_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    return _header(scope, b"transfer-encoding") is not None or (
        length is not None and length.strip() not in (b"", b"0")
    )


def _refuse_unread(scope: Scope, status: int, message: str, headers: Mapping[str, str] | None = None) -> ASGIApp:
    """An answer given before the body was read: the connection then closes, so the server reads no more of it
    either (kept alive, uvicorn would read and drop the rest of the body, however long)."""
    closing = {"connection": "close"} if _announces_body(scope) else {}
    return error_response(status, message, headers={**(headers or {}), **closing}, retry_after=status == 503)


class KeyFirst:
    """`/v1` requests without a valid API key get 401 before a byte of their body is read.

    Outside BodyLimit, which reads whole bodies (1 MiB by default) before
    the app, and so before the key check in services/api/auth.py, runs:
    there, anyone could make the service read and hold a megabyte per
    request. Here the key is checked from the headers alone, by the app's
    own gate (same answers, same counts, its cache); until then only what
    uvicorn buffers on its own is read (its flow control pauses reading at
    64 KiB of unread body). A key the gate cannot check within `seconds`
    (Postgres down) gets the 503 the route would have given.
    """

    def __init__(self, app: ASGIApp, gate: AuthGate, seconds: float) -> None:
        self.app = app
        self.gate = gate
        self.seconds = seconds
        # Checks given up at the deadline, kept until they end (the loop holds tasks weakly).
        self._abandoned: set[asyncio.Task[Principal]] = set()

    async def _principal(self, presented: str | None) -> Principal:
        """The gate's answer within `seconds`, else TimeoutError at once.

        Not asyncio.wait_for: it awaits the cancelled check, and a psycopg
        query cancelled against a hung Postgres takes seconds more to end.
        """
        task = asyncio.create_task(self.gate.principal(presented))
        done, _ = await asyncio.wait({task}, timeout=self.seconds)
        if task in done:
            return task.result()
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)
        task.add_done_callback(_retrieved)
        raise TimeoutError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not protected(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        presented = _header(scope, b"authorization")
        try:
            await self._principal(presented.decode("latin-1") if presented else None)
        except HTTPException as refused:
            await _refuse_unread(scope, refused.status_code, str(refused.detail), refused.headers)(scope, receive, send)
            return
        except (StoreError, TimeoutError) as exc:
            log.warning("request %s: API key not checked: %r", request_id(scope), exc)
            await _refuse_unread(scope, 503, UNAVAILABLE)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Bodies over `max_bytes` get 413 before the app sees them.

    A declared Content-Length over the cap is refused without reading a
    byte; otherwise chunks are counted as they arrive (chunked uploads have
    no length) and reading stops at the cap, so at most `max_bytes` plus one
    chunk is ever held. The accepted body is handed on as one message.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, scope: Scope) -> ASGIApp:
        return _refuse_unread(scope, 413, f"request body larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                first, body = body, None
                return first
            return await receive()

        await self.app(scope, replay, send)


_TRUE = frozenset({"1", "true", "yes", "on"})


def request_budget(scope: Scope, base: float, wait: float, transfer: float, ops: float) -> float:
    """The deadline of one request: `?wait=true` adds the wait for its effect; export and import move a whole user;
    operations read Kafka with a consumer of their own."""
    path = str(scope.get("path", ""))
    if path.endswith(("/export", "/import")):
        return max(base, transfer)
    if path.startswith("/v1/ops/"):
        return max(base, ops)
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    if any(v.lower() in _TRUE for v in query.get("wait", [])):
        return base + wait
    return base


class Deadline:
    """`/v1` requests not answered within `seconds` get 503 with Retry-After.

    The handler runs as its own task and is abandoned (cancelled, not
    awaited) at the deadline: a cancelled psycopg query first tries to cancel
    on the server, which takes seconds more when Postgres hangs. Whatever
    the abandoned task sends later is dropped.
    """

    def __init__(
        self, app: ASGIApp, seconds: float, prefix: str = "/v1/", budget: Callable[[Scope], float] | None = None
    ) -> None:
        """`budget(scope)` gives a request its own deadline (a write that waits for its effect, an export)."""
        self.app = app
        self.seconds = seconds
        self.prefix = prefix
        self.budget = budget
        # The loop holds tasks weakly: abandoned ones are kept here until they end.
        self._abandoned: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        started = False
        abandoned = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if abandoned:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def handle() -> None:
            await self.app(scope, receive, guarded_send)

        task = asyncio.create_task(handle())
        try:
            timeout = self.seconds if self.budget is None else self.budget(scope)
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task in done or started:
            # Finished, or already answering: let the response complete.
            await task
            return
        abandoned = True
        task.cancel()
        rid = request_id(scope)
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)
        task.add_done_callback(lambda t: _log_abandoned(t, rid))
        log.warning("request %s (%s %r) exceeded %.1fs", rid, scope.get("method"), scope.get("path"), self.seconds)
        await unavailable()(scope, receive, send)


def _retrieved(task: asyncio.Task[Principal]) -> None:
    """Retrieve an abandoned task's outcome, so asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _log_abandoned(task: asyncio.Task[None], rid: str) -> None:
    """Retrieve the abandoned task's outcome, so asyncio does not report it as never retrieved."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.info("request %s: abandoned handler ended with %r", rid, exc)
