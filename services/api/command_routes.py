"""Memory commands over HTTP: add, correct, delete (one, by session, by topic), forget a user.

Every command is validated here and checked against what memory holds (404
for an unknown memory, session, topic or user; 409 for a memory that is no
longer current) before it is produced (services/api/command_submit.py).
Export and import are services/api/transfer_routes.py.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from schemas import MemoryRecord, MemoryStatus
from schemas.commands import AddMemory, AnyCommand, CorrectMemory, DeleteMemory, DeleteSession, DeleteTopic, ForgetUser
from services.api import docs, errors
from services.api.command_models import AddMemoryRequest, CommandReceipt, CorrectMemoryRequest, Topic
from services.api.command_submit import ACCEPTED, CommandSubmitter, Target, not_found
from services.api.jsonbody import StrictJsonRoute
from services.api.models import MemoryIdPath, SessionPath
from services.core import tracing
from services.core.command_rules import matches_topic, new_memory_id
from services.runtime import Runtime
from services.stores.postgres.commands import CommandStore
from services.stores.postgres.forget import holds_user

# The GenAI semantic conventions' operation names (gen_ai.operation.name) for memory commands.
CREATE_MEMORY, UPDATE_MEMORY, DELETE_MEMORY = "create_memory", "update_memory", "delete_memory"


def command_router(rt: Runtime, commands: CommandSubmitter, store: CommandStore) -> APIRouter:
    api = APIRouter(route_class=StrictJsonRoute, tags=[docs.MEMORIES])

    async def submitted(
        operation: str, scope: str, target: Target, cmds: list[AnyCommand], memory_id: str | None = None
    ) -> CommandReceipt:
        """`commands.submit` under the operation's span; the command's Kafka headers carry its context."""
        with tracing.memory_operation(operation, cmds[0].tenant_id) as span:
            span.set_attribute(tracing.SCOPE, scope)
            return await commands.submit(target, cmds, memory_id=memory_id)

    async def current(tenant_id: str, user_id: str, memory_id: str) -> MemoryRecord:
        """The memory a correction or delete names: 404 when unknown, 409 when it is no longer the current version."""
        async with rt.pg.connection("command_target") as conn:
            held = await rt.memories.with_vector(conn, tenant_id, user_id, memory_id)
        if held is None:
            raise not_found(f"memory {memory_id}")
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
        responses={**ACCEPTED, **errors.responses(409)},
    )
    async def add_memory(body: AddMemoryRequest, target: Target) -> CommandReceipt:
        tenant = target.tenant(body.tenant_id)
        envelope = target.envelope(tenant)
        memory_id = new_memory_id(tenant, target.user_id, envelope["command_id"])
        cmd = AddMemory(**envelope, memory_id=memory_id, **body.model_dump(exclude={"tenant_id"}))
        return await submitted(CREATE_MEMORY, "memory", target, [cmd], memory_id=memory_id)

    @api.patch(
        "/v1/users/{user_id}/memories/{memory_id}",
        status_code=202,
        response_model=CommandReceipt,
        summary="Correct a memory's text: a new version supersedes it (history kept), re-embedded and re-indexed",
        responses={**ACCEPTED, **errors.responses(404, 409)},
    )
    async def correct_memory(memory_id: MemoryIdPath, body: CorrectMemoryRequest, target: Target) -> CommandReceipt:
        tenant = target.tenant(body.tenant_id)
        await current(tenant, target.user_id, memory_id)
        envelope = target.envelope(tenant)
        new_id = new_memory_id(tenant, target.user_id, envelope["command_id"])
        cmd = CorrectMemory(**envelope, memory_id=memory_id, new_id=new_id, text=body.text, value=body.value)
        return await submitted(UPDATE_MEMORY, "memory", target, [cmd], memory_id=new_id)

    @api.delete(
        "/v1/users/{user_id}/memories/{memory_id}",
        status_code=202,
        response_model=CommandReceipt,
        summary="Delete one memory: out of recall and the index, kept in history as `deleted`",
        responses={**ACCEPTED, **errors.responses(404, 409)},
    )
    async def delete_memory(memory_id: MemoryIdPath, target: Target) -> CommandReceipt:
        tenant = target.tenant()
        await current(tenant, target.user_id, memory_id)
        return await submitted(
            DELETE_MEMORY, "memory", target, [DeleteMemory(**target.envelope(tenant), memory_id=memory_id)]
        )

    @api.delete(
        "/v1/users/{user_id}/memories",
        status_code=202,
        response_model=CommandReceipt,
        summary="Delete every active memory about a topic or entity",
        description="A memory matches when the topic (case and spacing aside) names its category, key or one of "
        "its entities, or when every content word of the topic (stopwords aside) is a word of its text, value "
        "or entities: `green tea` takes `I love green tea`, not `greenhouse tea rooms`.",
        responses={**ACCEPTED, **errors.responses(404)},
    )
    async def delete_topic(topic: Topic, target: Target) -> CommandReceipt:
        tenant = target.tenant()
        async with rt.pg.connection("delete_topic_check") as conn:
            active = await store.active(conn, tenant, target.user_id)
        if not any(matches_topic(record, topic) for record in active):
            raise not_found(f"memory about {topic!r}")
        return await submitted(DELETE_MEMORY, "topic", target, [DeleteTopic(**target.envelope(tenant), topic=topic)])

    @api.delete(
        "/v1/users/{user_id}/sessions/{session_id}/memories",
        status_code=202,
        response_model=CommandReceipt,
        summary="Delete every active memory derived from one session (its provenance names the session)",
        responses={**ACCEPTED, **errors.responses(404)},
    )
    async def delete_session(session_id: SessionPath, target: Target) -> CommandReceipt:
        tenant = target.tenant()
        async with rt.pg.connection("delete_session_check") as conn:
            active = await store.active(conn, tenant, target.user_id, session_id=session_id)
        if not active:
            raise not_found(f"memory from session {session_id}")
        cmd = DeleteSession(**target.envelope(tenant), session_id=session_id)
        return await submitted(DELETE_MEMORY, "session", target, [cmd])

    @api.delete(
        "/v1/users/{user_id}",
        status_code=202,
        response_model=CommandReceipt,
        summary="Forget a user: every row naming them in Postgres and every index point",
        description="Memories in every status (history too), raw turns, sessions and windows, session summaries, "
        "applied commands, pending outbox messages, index points. Afterwards every route answers as for an "
        "unknown user. What is still in flight on the topics for the user is processed as it arrives.",
        responses={**ACCEPTED, **errors.responses(404)},
    )
    async def forget_user(target: Target) -> CommandReceipt:
        tenant = target.tenant()
        await _known(tenant, target.user_id)
        return await submitted(DELETE_MEMORY, "user", target, [ForgetUser(**target.envelope(tenant))])

    async def _known(tenant_id: str, user_id: str) -> None:
        async with rt.pg.connection("user_known") as conn:
            if not await holds_user(conn, tenant_id, user_id):
                raise not_found(f"user {user_id}")

    return api
