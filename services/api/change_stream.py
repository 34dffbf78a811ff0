"""A user's memory changes as they happen, as server-sent events.

`GET /v1/users/{user_id}/changes?tenant_id=` tails `memory.changes` from its
end (pinned as services/kafka/log_tail.py does), keeps the messages keyed to this tenant and
user before opening anything (other users' keys are never looked up), opens
them with the users' data keys (services/archive/changes.py, the one way to
read the topic) and sends each as an SSE `change` event: the MemoryChange's
op, cause and record, without vectors. A `forgotten` event ends the stream.
A comment line every few seconds keeps proxies from closing an idle stream.

It is a GET with the usual Bearer header: a browser reads it with fetch()
and a stream reader (EventSource cannot send the header, and a key in the
URL would end up in logs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from schemas.commands import UserForgotten
from schemas.events import partition_key
from services.api import docs
from services.api.models import TenantQ, UserPath
from services.archive.changes import open_changes
from services.core import generations
from services.core.kafka_auth import aiokafka_kwargs
from services.kafka.log_tail import pin_to_log_end
from services.runtime import Runtime

KEEPALIVE_SECONDS = 10.0


def sse(event: str, data: object) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def events(rt: Runtime, tenant_id: str, user_id: str) -> AsyncIterator[bytes]:
    """`ready` once pinned to the log's end (so nothing produced after it is missed), then the user's changes."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    settings = rt.settings
    topic = generations.of(settings).topic("changes")
    key = partition_key(tenant_id, user_id)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=max(settings.fetch_max_wait_ms, 100),
        **aiokafka_kwargs(settings),
    )
    try:  # started inside: a start cut short (a silent broker, a cancelled request) still stops it
        await consumer.start()
        await consumer.topics()
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            yield sse("error", {"message": f"topic {topic} does not exist"})
            return
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        await pin_to_log_end(consumer)
        yield sse("ready", {"tenant_id": tenant_id, "user_id": user_id})
        while True:
            fetched = await consumer.getmany(timeout_ms=int(KEEPALIVE_SECONDS * 1000), max_records=500)
            if not fetched:
                yield b": keepalive\n\n"
                continue
            mine = [m.value for batch in fetched.values() for m in batch if m.key == key]
            opened, _ = await open_changes(rt.keys, mine) if mine else ([], None)
            for change in opened:
                if change.tenant_id != tenant_id or change.user_id != user_id:
                    continue
                if isinstance(change, UserForgotten):
                    yield sse("forgotten", {"tenant_id": tenant_id, "user_id": user_id})
                    return
                yield sse("change", change.model_dump(mode="json", exclude={"vector", "context_vector"}))
    finally:
        await consumer.stop()


def change_router(rt: Runtime) -> APIRouter:
    api = APIRouter(tags=[docs.MEMORIES])

    @api.get(
        "/v1/users/{user_id}/changes",
        response_class=StreamingResponse,
        summary="The user's memory changes as they happen (server-sent events: ready, change, forgotten)",
        # Out of the OpenAPI document: an endless stream is not a request/response operation (docs/console.md).
        include_in_schema=False,
    )
    async def changes(user_id: UserPath, tenant_id: TenantQ) -> StreamingResponse:
        return StreamingResponse(
            events(rt, tenant_id, user_id),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    return api
