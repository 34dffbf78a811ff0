"""API keys over HTTP, for admins (services/auth/policy.py: everything under /v1/keys needs admin).

A tenant admin lists, creates and revokes its own tenant's keys; an operator
key sees every key and creates keys for any tenant it names. No route makes
an operator key: that stays with `memstream keys create`, on the host.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from services.api import docs, errors
from services.api.auth import CurrentPrincipal, tenant_scope
from services.api.jsonbody import StrictJsonRoute
from services.api.models import KeyIdPath, KeyInfo, KeyList, NewKey, NewKeyRequest, TenantOptQ
from services.auth import ApiKey, KeyStore, Role, load_secret
from services.runtime import Runtime


def key_info(key: ApiKey) -> KeyInfo:
    return KeyInfo(
        id=key.id,
        tenant_id=key.tenant_id,
        role=key.role.value,
        name=key.name,
        hint=key.hint,
        created_at=key.created_at,
        last_used_at=key.last_used_at,
        revoked_at=key.revoked_at,
    )


def key_router(rt: Runtime) -> APIRouter:
    api = APIRouter(route_class=StrictJsonRoute, tags=[docs.OPERATIONS])
    store = KeyStore(rt.pg)

    @api.get("/v1/keys", response_model=KeyList, summary="API keys: the tenant's, or every key for an operator")
    async def list_keys(
        principal: CurrentPrincipal,
        tenant_id: TenantOptQ = None,
    ) -> KeyList:
        tenant = tenant_id if principal.is_operator else principal.tenant_id
        return KeyList(keys=[key_info(k) for k in await store.list_keys(tenant)])

    @api.post(
        "/v1/keys",
        status_code=201,
        response_model=NewKey,
        summary="Create an API key for a tenant: the answer is the only time the key is shown",
    )
    async def create_key(
        principal: CurrentPrincipal,
        body: NewKeyRequest,
        tenant_id: TenantOptQ = None,
    ) -> NewKey:
        tenant = tenant_scope(principal, tenant_id)
        record, key = await store.create(
            load_secret(rt.settings), tenant_id=tenant, role=Role(body.role), name=body.name
        )
        return NewKey(key=key, record=key_info(record))

    @api.delete(
        "/v1/keys/{key_id}",
        response_model=KeyInfo,
        summary="Revoke an API key (its record stays, with the time it was revoked)",
        responses=errors.responses(404),
    )
    async def revoke_key(principal: CurrentPrincipal, key_id: KeyIdPath) -> KeyInfo:
        visible = {k.id: k for k in await store.list_keys(principal.tenant_id)}
        held = visible.get(key_id)
        if held is None or not held.active:
            raise HTTPException(404, f"no active key {key_id} for this tenant")
        revoked = await store.revoke(key_id)
        if revoked is None:
            raise HTTPException(404, f"no active key {key_id} for this tenant")
        return key_info(revoked)

    return api
