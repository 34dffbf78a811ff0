"""Memory commands over HTTP: add, correct, delete (one, by session, by topic), forget a user, export, import.

Every write is validated here, checked against what memory holds (404 for
an unknown memory, session, topic or user; 409 for a memory that is no
longer current or an import into a user who has data), then produced to
`memory.commands` and applied by the consolidator's commands stage, in order
with the user's other commands, so subscribers and replays see it. The
answer is 202 with the command id once the broker has it; `?wait=true`
answers 200 once the change shows in Postgres and the recall index
(services/api/command_log.py), so a client can read its own write.

A waiting request's deadline is MEMSTREAM_HTTP_REQUEST_TIMEOUT plus
MEMSTREAM_COMMAND_WAIT_TIMEOUT (services.api.limits.request_budget); a wait
that runs out answers 202.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Response
from fastapi.responses import StreamingResponse

from agents.consolidator.command_plan import ItemTooLarge, import_parts, matches_topic, new_memory_id
from schemas import MemoryRecord, MemoryStatus
from schemas.commands import (
    AddMemory,
    AnyCommand,
    CorrectMemory,
    DeleteMemory,
    DeleteSession,
    DeleteTopic,
    ForgetUser,
)
from schemas.export import ExportDocument, document_json
from services.api import docs, errors
from services.api.auth import CurrentPrincipal, tenant_scope
from services.api.command_log import CommandLog, wait_until_applied
from services.api.command_models import (
    AddMemoryRequest,
    AppliedChange,
    CommandReceipt,
    CorrectMemoryRequest,
    ImportRequest,
    TenantOptQ,
    Topic,
    Wait,
    WithVectors,
)
from services.api.jsonbody import StrictJsonRoute
from services.api.models import MemoryIdPath, SessionPath, UserPath
from services.archive.codec import sealable_bytes
from services.auth import Principal
from services.runtime import Runtime
from services.stores.postgres.commands import CommandStore
from services.stores.postgres.export import export_head, export_pages
from services.stores.postgres.forget import holds_user

# Left of the request deadline for answering once a wait gives up.
_ANSWER_MARGIN = 0.25
_store = CommandStore()
_ACCEPTED: dict[int | str, dict[str, Any]] = {
    200: {"model": CommandReceipt, "description": "`?wait=true`: applied, visible in Postgres and the index"}
}


def _tenant(principal: Principal, *named: str | None) -> str:
    """The tenant from the query string or the body (they must agree), else the key's."""
    given = {t for t in named if t is not None}
    if len(given) > 1:
        raise HTTPException(422, "tenant_id in the query string and in the body differ")
    return tenant_scope(principal, next(iter(given), None))


def _not_found(what: str) -> HTTPException:
    return HTTPException(404, f"no {what} for this tenant and user")


def memory_router(rt: Runtime) -> APIRouter:
    settings = rt.settings
    log = CommandLog(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await log.close()

    api = APIRouter(lifespan=lifespan, route_class=StrictJsonRoute, tags=[docs.MEMORIES])

    async def submit(
        response: Response,
        commands: Sequence[AnyCommand],
        *,
        wait: bool,
        started: float,
        memory_id: str | None = None,
        command_id: str | None = None,
    ) -> CommandReceipt:
        first = commands[0]
        await log.send(commands)
        receipt = CommandReceipt(
            command_id=command_id or first.command_id,
            kind=first.kind,
            status="accepted",
            memory_id=memory_id,
            parts=len(commands) if first.kind == "import" else None,
        )
        if not wait:
            return receipt
        # The request's deadline is http_request_timeout + command_wait_timeout (services.api.limits).
        left = settings.http_request_timeout + settings.command_wait_timeout - _ANSWER_MARGIN
        changes = await wait_until_applied(
            rt,
            first.tenant_id,
            first.user_id,
            [c.command_id for c in commands],
            forget=first.kind == "forget",
            seconds=min(settings.command_wait_timeout, left - (time.monotonic() - started)),
        )
        if changes is None:
            return receipt
        response.status_code = 200
        return receipt.model_copy(
            update={"status": "applied", "changes": [AppliedChange.model_validate(c) for c in changes]}
        )

    async def current(tenant_id: str, user_id: str, memory_id: str) -> MemoryRecord:
        """The memory a correction or delete names: 404 when unknown, 409 when it is no longer the current version."""
        async with rt.pg.connection("command_target") as conn:
            held = await rt.memories.with_vector(conn, tenant_id, user_id, memory_id)
        if held is None:
            raise _not_found(f"memory {memory_id}")
        record = held[0]
        if record.status is not MemoryStatus.ACTIVE:
            newer = f"; its current version is {record.superseded_by}" if record.superseded_by else ""
            raise HTTPException(409, f"memory {memory_id} is {record.status.value}{newer}")
        return record

    @api.post(
        "/v1/users/{user_id}/memories",
        status_code=202,
        response_model=CommandReceipt,
        summary="Add a memory by hand (embedded and indexed like any other; provenance source: manual)",
        responses={**_ACCEPTED, **errors.responses(409)},
    )
    async def add_memory(
        user_id: UserPath,
        body: AddMemoryRequest,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id, body.tenant_id)
        command_id = str(uuid.uuid4())
        memory_id = new_memory_id(tenant, user_id, command_id)
        fields = body.model_dump(exclude={"tenant_id"})
        cmd = AddMemory(
            command_id=command_id, tenant_id=tenant, user_id=user_id, at=_now(), memory_id=memory_id, **fields
        )
        return await submit(response, [cmd], wait=wait, started=started, memory_id=memory_id)

    @api.patch(
        "/v1/users/{user_id}/memories/{memory_id}",
        status_code=202,
        response_model=CommandReceipt,
        summary="Correct a memory's text: a new version supersedes it (history kept), re-embedded and re-indexed",
        responses={**_ACCEPTED, **errors.responses(404, 409)},
    )
    async def correct_memory(
        user_id: UserPath,
        memory_id: MemoryIdPath,
        body: CorrectMemoryRequest,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id, body.tenant_id)
        await current(tenant, user_id, memory_id)
        command_id = str(uuid.uuid4())
        new_id = new_memory_id(tenant, user_id, command_id)
        cmd = CorrectMemory(
            command_id=command_id,
            tenant_id=tenant,
            user_id=user_id,
            at=_now(),
            memory_id=memory_id,
            new_id=new_id,
            text=body.text,
            value=body.value,
        )
        return await submit(response, [cmd], wait=wait, started=started, memory_id=new_id)

    @api.delete(
        "/v1/users/{user_id}/memories/{memory_id}",
        status_code=202,
        response_model=CommandReceipt,
        summary="Delete one memory: out of recall and the index, kept in history as `deleted`",
        responses={**_ACCEPTED, **errors.responses(404, 409)},
    )
    async def delete_memory(
        user_id: UserPath,
        memory_id: MemoryIdPath,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id)
        await current(tenant, user_id, memory_id)
        cmd = DeleteMemory(
            command_id=str(uuid.uuid4()), tenant_id=tenant, user_id=user_id, at=_now(), memory_id=memory_id
        )
        return await submit(response, [cmd], wait=wait, started=started)

    @api.delete(
        "/v1/users/{user_id}/memories",
        status_code=202,
        response_model=CommandReceipt,
        summary="Delete every active memory about a topic or entity",
        description="A memory matches when the topic (case and spacing aside) names its category, key or one of "
        "its entities, or when every content word of the topic (stopwords aside) is a word of its text, value "
        "or entities: `green tea` takes `I love green tea`, not `greenhouse tea rooms`.",
        responses={**_ACCEPTED, **errors.responses(404)},
    )
    async def delete_topic(
        user_id: UserPath,
        topic: Topic,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id)
        async with rt.pg.connection("delete_topic_check") as conn:
            active = await _store.active(conn, tenant, user_id)
        if not any(matches_topic(record, topic) for record in active):
            raise _not_found(f"memory about {topic!r}")
        cmd = DeleteTopic(command_id=str(uuid.uuid4()), tenant_id=tenant, user_id=user_id, at=_now(), topic=topic)
        return await submit(response, [cmd], wait=wait, started=started)

    @api.delete(
        "/v1/users/{user_id}/sessions/{session_id}/memories",
        status_code=202,
        response_model=CommandReceipt,
        summary="Delete every active memory derived from one session (its provenance names the session)",
        responses={**_ACCEPTED, **errors.responses(404)},
    )
    async def delete_session(
        user_id: UserPath,
        session_id: SessionPath,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id)
        async with rt.pg.connection("delete_session_check") as conn:
            active = await _store.active(conn, tenant, user_id, session_id=session_id)
        if not active:
            raise _not_found(f"memory from session {session_id}")
        cmd = DeleteSession(
            command_id=str(uuid.uuid4()), tenant_id=tenant, user_id=user_id, at=_now(), session_id=session_id
        )
        return await submit(response, [cmd], wait=wait, started=started)

    @api.delete(
        "/v1/users/{user_id}",
        status_code=202,
        response_model=CommandReceipt,
        summary="Forget a user: every row naming them in Postgres and every index point",
        description="Memories in every status (history too), raw turns, sessions and windows, session summaries, "
        "applied commands, pending outbox messages, index points. Afterwards every route answers as for an "
        "unknown user. What is still in flight on the topics for the user is processed as it arrives.",
        responses={**_ACCEPTED, **errors.responses(404)},
    )
    async def forget_user(
        user_id: UserPath,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id)
        await _known(tenant, user_id)
        cmd = ForgetUser(command_id=str(uuid.uuid4()), tenant_id=tenant, user_id=user_id, at=_now())
        return await submit(response, [cmd], wait=wait, started=started)

    @api.get(
        "/v1/users/{user_id}/export",
        response_model=ExportDocument,
        summary="Everything memstream holds on a user, as one `memstream.export/v1` JSON document",
        description="Streamed as it is read, a page of rows at a time, so its size is not bounded by the "
        "server's memory; a 404 comes before any of it.",
        responses=errors.responses(404),
    )
    async def export(
        user_id: UserPath, principal: CurrentPrincipal, tenant_id: TenantOptQ = None, vectors: WithVectors = False
    ) -> StreamingResponse:
        tenant = _tenant(principal, tenant_id)
        model = (await rt.embedder()).name if vectors else None
        chunks = _export(tenant, user_id, model)
        first = await anext(chunks)  # the 404, before the response starts
        return StreamingResponse(_prepend(first, chunks), media_type="application/json")

    async def _export(tenant: str, user_id: str, model: str | None) -> AsyncGenerator[bytes, None]:
        """The document's bytes; the transaction (and its pooled connection) lasts as long as the response."""
        async with rt.pg.transaction("export") as conn:
            # One snapshot: a command applied meanwhile is in the document entirely or not at all.
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if not await holds_user(conn, tenant, user_id):
                raise _not_found(f"user {user_id}")
            head = await export_head(conn, tenant, user_id, exported_at=_now(), embedding_model=model)
            async for chunk in document_json(head, export_pages(conn, tenant, user_id, vectors=model is not None)):
                yield chunk

    @api.post(
        "/v1/users/{user_id}/import",
        status_code=202,
        response_model=CommandReceipt,
        summary="Load an export document into a user who holds no data (another tenant, user or installation)",
        description="Everything in the document is written as it is (timestamps, versions, history, provenance), "
        "under this tenant and user. Each memory gets an id of its own, derived from the document's id under "
        "this user's key (never the document's id itself: ids are global), and remembers the document's, so "
        "exporting it again gives the same document and importing the same document again writes the same rows. "
        "Vectors are used when they come from the same model, else the texts are re-embedded.",
        responses={**_ACCEPTED, **errors.responses(409)},
    )
    async def import_document(
        user_id: UserPath,
        body: ImportRequest,
        principal: CurrentPrincipal,
        response: Response,
        tenant_id: TenantOptQ = None,
        wait: Wait = False,
    ) -> CommandReceipt:
        started = time.monotonic()
        tenant = _tenant(principal, tenant_id, body.tenant_id)
        async with rt.pg.connection("import_check") as conn:
            if await holds_user(conn, tenant, user_id):
                raise HTTPException(409, "this user already holds data: import into a new user, or forget this one")
        import_id = str(uuid.uuid4())
        try:
            # Each part is archived sealed once applied (base64): cut to what still fits in a message then.
            budget = sealable_bytes(settings.max_message_bytes)
            parts = import_parts(body.document, tenant, user_id, import_id, _now(), budget)
        except ItemTooLarge as exc:
            raise HTTPException(413, str(exc)) from exc
        return await submit(response, parts, wait=wait, started=started, command_id=import_id)

    async def _known(tenant_id: str, user_id: str) -> None:
        async with rt.pg.connection("user_known") as conn:
            if not await holds_user(conn, tenant_id, user_id):
                raise _not_found(f"user {user_id}")

    return api


def _now() -> datetime:
    return datetime.now(UTC)


async def _prepend(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """`first`, then `rest`; `rest` is closed however the response ends (a client gone mid-way included)."""
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()
