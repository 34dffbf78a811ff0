"""What the console reads about users: a tenant's users, one memory with its sources, a filtered listing.

Every memory read names both tenant and user; the user listing is the one
tenant-level read (a tenant key sees its own tenant; an operator names one).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from schemas import MemoryStatus, MemoryType
from schemas.memory import LAYER_OF_TYPE, MemoryLayer
from schemas.validation import Timestamp
from services.api import docs, errors
from services.api.auth import CurrentPrincipal, tenant_scope
from services.api.jsonbody import StrictJsonRoute
from services.api.models import (
    Limit,
    MemoryDetail,
    MemoryIdPath,
    MemoryList,
    Offset,
    SourceTurn,
    TenantOptQ,
    TenantQ,
    UserList,
    UserPath,
    UserSummary,
)
from services.runtime import Runtime
from services.stores.postgres.memory_reads import memory_with_sources, tenant_users

# RFC 3339 with an offset, as every other time memstream takes: an epoch number or a naive time is a 422.
Since = Annotated[Timestamp | None, Query(description="Only memories observed at or after this time")]
Until = Annotated[Timestamp | None, Query(description="Only memories observed before this time")]
AsOf = Annotated[
    Timestamp | None, Query(description="Only memories that were active memory at this time (point-in-time)")
]


def types_of(layer: MemoryLayer | None) -> list[str]:
    """The types of a layer ([] for every type)."""
    return [] if layer is None else sorted(t.value for t, held in LAYER_OF_TYPE.items() if held is layer)


def user_router(rt: Runtime) -> APIRouter:
    api = APIRouter(route_class=StrictJsonRoute, tags=[docs.MEMORIES])

    @api.get("/v1/users", response_model=UserList, summary="A tenant's users, with their memories by type and status")
    async def list_users(
        principal: CurrentPrincipal,
        tenant_id: TenantOptQ = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> UserList:
        tenant = tenant_scope(principal, tenant_id)
        found = await tenant_users(rt.pg, tenant, limit=limit, offset=offset)
        return UserList(
            tenant_id=tenant,
            users=[
                UserSummary(user_id=u.user_id, total=u.total, by_type=u.by_type, by_status=u.by_status) for u in found
            ],
        )

    @api.get(
        "/v1/users/{user_id}/memories",
        response_model=MemoryList,
        summary="List a user's memories, filtered by type, layer, status, time observed and point in time",
    )
    async def list_memories(
        user_id: UserPath,
        tenant_id: TenantQ,
        type: MemoryType | None = None,
        layer: MemoryLayer | None = None,
        status: MemoryStatus | None = None,
        since: Since = None,
        until: Until = None,
        as_of: AsOf = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> MemoryList:
        types = types_of(layer)
        if type is not None and types and type.value not in types:
            return MemoryList(memories=[])
        found = await rt.reads.list_memories(
            tenant_id,
            user_id,
            type_=type,
            status=status,
            limit=limit,
            offset=offset,
            types=types,
            since=since,
            until=until,
            as_of=as_of,
        )
        return MemoryList(memories=found)

    @api.get(
        "/v1/users/{user_id}/memories/{memory_id}",
        response_model=MemoryDetail,
        summary="One memory, with the turns it was derived from",
        responses=errors.responses(404),
    )
    async def get_memory(user_id: UserPath, memory_id: MemoryIdPath, tenant_id: TenantQ) -> MemoryDetail:
        held = await memory_with_sources(rt.pg, tenant_id, user_id, memory_id)
        if held is None:
            raise HTTPException(status_code=404, detail=f"no memory {memory_id} for this tenant and user")
        record, turns = held
        return MemoryDetail(
            memory=record,
            layer=LAYER_OF_TYPE[record.type],
            sources=[
                SourceTurn(event_id=t.event_id, session_id=t.session_id, role=t.role, text=t.content, ts=t.ts)
                for t in turns
            ],
        )

    return api
