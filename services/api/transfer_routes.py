"""Export and import over HTTP: everything held on a user as one document, and such a document loaded again.

Export reads one snapshot and streams it; import checks the user holds no
data (409), cuts the document into `import` commands that each fit in a
message (413 for an item that cannot: services.core.import_parts) and
produces them like any memory command (services/api/command_submit.py).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, AsyncIterator

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from schemas.export import ExportDocument, document_json
from services.api import docs, errors
from services.api.auth import CurrentPrincipal
from services.api.command_models import CommandReceipt, ImportRequest, TenantOptQ, WithVectors
from services.api.command_submit import ACCEPTED, CommandSubmitter, Target, command_tenant, not_found, now
from services.api.jsonbody import StrictJsonRoute
from services.api.models import UserPath
from services.archive.codec import sealable_bytes
from services.core.import_parts import ItemTooLarge, import_parts
from services.runtime import Runtime
from services.stores.postgres.export import export_head, export_pages
from services.stores.postgres.forget import holds_user


def transfer_router(rt: Runtime, commands: CommandSubmitter) -> APIRouter:
    api = APIRouter(route_class=StrictJsonRoute, tags=[docs.MEMORIES])

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
        tenant = command_tenant(principal, tenant_id)
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
                raise not_found(f"user {user_id}")
            head = await export_head(conn, tenant, user_id, exported_at=now(), embedding_model=model)
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
        responses={**ACCEPTED, **errors.responses(409)},
    )
    async def import_document(body: ImportRequest, target: Target) -> CommandReceipt:
        tenant, user_id = target.tenant(body.tenant_id), target.user_id
        async with rt.pg.connection("import_check") as conn:
            if await holds_user(conn, tenant, user_id):
                raise HTTPException(409, "this user already holds data: import into a new user, or forget this one")
        import_id = str(uuid.uuid4())
        try:
            # Each part is archived sealed once applied (base64): cut to what still fits in a message then.
            budget = sealable_bytes(rt.settings.max_message_bytes)
            parts = import_parts(body.document, tenant, user_id, import_id, now(), budget)
        except ItemTooLarge as exc:
            raise HTTPException(413, str(exc)) from exc
        return await commands.submit(target, parts, command_id=import_id)

    return api


async def _prepend(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """`first`, then `rest`; `rest` is closed however the response ends (a client gone mid-way included)."""
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()
