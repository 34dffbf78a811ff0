"""Operations for admins: consumer lag per stage and the newest dead letters.

Both read Kafka on demand (a short-lived consumer per request): an admin's
page, not a hot path. A fresh consumer connects, reads metadata and fetches
each partition, which takes seconds on a busy machine, so these routes have a
deadline of their own (MEMSTREAM_HTTP_OPS_TIMEOUT, 8 s by default) and read
within 70% of it: a lag the broker did not report in time is null, and dead
letters are what arrived in time, with `complete` false when some did not.
A tenant admin sees the lag (no tenant data in it) and only its own tenant's
dead letters; an operator key sees every entry. An entry's original bytes
come back as base64 and as an escaped printable preview, which the console
renders as text only.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from services.api import docs
from services.api.auth import CurrentPrincipal
from services.api.jsonbody import StrictJsonRoute
from services.api.models import DeadLetterEntry, DeadLetterList, LagReport, StageLag
from services.archive import dlq as sealed
from services.auth import Principal, Role
from services.core import generations, topics
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs
from services.core.stages import STAGE_INPUTS, group_id
from services.kafka.dead_letters import REASON_HEADER
from services.kafka.log_end import group_lag
from services.kafka.log_tail import pin_to_log_end
from services.runtime import Runtime

PREVIEW_CHARS = 400
# Of the request's deadline (MEMSTREAM_HTTP_OPS_TIMEOUT), what reading Kafka may take; the rest answers.
_READ_SHARE = 0.7
ADMIN_ONLY = "this route needs an admin key"


def require_admin(principal: Principal) -> None:
    """The role rule gives GET routes to readers; operations are for admins."""
    if not principal.role.allows(Role.ADMIN):
        raise HTTPException(403, ADMIN_ONLY)


def preview(raw: bytes | None) -> str:
    """Printable text of the first bytes: UTF-8 where it decodes, every control character escaped."""
    if raw is None:
        return ""
    text = raw[: PREVIEW_CHARS * 4].decode("utf-8", "backslashreplace")[:PREVIEW_CHARS]
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


async def newest(settings: Settings, topic: str, limit: int, within: float) -> tuple[list[tuple[int, int, Any]], bool]:
    """The last `limit` messages of each partition of `topic`, as (partition, offset, message), and whether all came.

    `within` counts from the call, the consumer's start included: what has
    not come by then is left out, and the flag says so. (A broker that never
    answers the start leaves it to the request's deadline.)
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    deadline = time.monotonic() + within
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, group_id=None, enable_auto_commit=False, **aiokafka_kwargs(settings)
    )
    try:  # started inside: a start cut short (a silent broker, a cancelled request) still stops it
        await consumer.start()
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not tps:
            return [], True
        consumer.assign(tps)
        # The ends as fetch responses report them: the embedded broker's ListOffsets "latest" is wrong
        # (services/kafka/log_end.py).
        await pin_to_log_end(consumer, within=max(deadline - time.monotonic(), 0.1))
        ends: Mapping[Any, int] = {tp: consumer.highwater(tp) for tp in tps}
        starts: Mapping[Any, int] = await consumer.beginning_offsets(tps)
        wanted = {tp: max(starts[tp], ends[tp] - limit) for tp in tps if ends[tp] > starts[tp]}
        for tp, offset in wanted.items():
            consumer.seek(tp, offset)
        found: list[tuple[int, int, Any]] = []

        async def short() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in wanted])

        # An empty fetch is normal while the consumer warms up: stop at the ends, or at the deadline.
        while await short() and time.monotonic() < deadline:
            fetched = await consumer.getmany(*wanted, timeout_ms=200)
            found += [
                (tp.partition, m.offset, m) for tp, batch in fetched.items() for m in batch if m.offset < ends[tp]
            ]
        return sorted(found, key=lambda f: (f[0], f[1])), not await short()
    finally:
        await consumer.stop()


def ops_router(rt: Runtime) -> APIRouter:
    api = APIRouter(route_class=StrictJsonRoute, tags=[docs.OPERATIONS])
    settings = rt.settings
    read_within = settings.http_ops_timeout * _READ_SHARE

    @api.get("/v1/ops/lag", response_model=LagReport, summary="Messages each stage has not committed yet (admins)")
    async def lag(principal: CurrentPrincipal) -> LagReport:
        require_admin(principal)
        gen = generations.of(settings)
        pairs = [(stage, gen.topic(role)) for stage, role in STAGE_INPUTS]
        lags = await asyncio.gather(
            *(
                group_lag(settings, group_id(settings.app_id, stage), topic, within=read_within)
                for stage, topic in pairs
            ),
            return_exceptions=True,
        )
        return LagReport(
            stages=[
                StageLag(stage=stage, topic=topic, lag=held if isinstance(held, int) else None)
                for (stage, topic), held in zip(pairs, lags, strict=True)
            ]
        )

    @api.get(
        "/v1/ops/dlq",
        response_model=DeadLetterList,
        summary="The newest dead letters, with reason and original bytes (admins; a tenant's own only)",
    )
    async def dlq(
        principal: CurrentPrincipal,
        limit: Annotated[
            int,
            Query(
                ge=1, le=500, description="Newest entries per partition", openapi_examples={"example": {"value": 20}}
            ),
        ] = 50,
    ) -> DeadLetterList:
        require_admin(principal)
        messages, complete = await newest(settings, topics.DLQ, limit, within=read_within)
        heads = [(m.value, {k: bytes(v) for k, v in m.headers}) for _, _, m in messages]
        opened = await sealed.open_entries(rt.keys, heads)
        entries = []
        for (partition, offset, message), (_, headers), entry in zip(messages, heads, opened, strict=True):
            owner = entry.owner or sealed.keyed_owner(message.key)
            if principal.tenant_id is not None and (owner is None or owner[0] != principal.tenant_id):
                continue
            entries.append(
                DeadLetterEntry(
                    partition=partition,
                    offset=offset,
                    reason=headers.get(REASON_HEADER, b"").decode("utf-8", "replace") or entry.state,
                    state=entry.state,
                    headers={k.removeprefix("x-memstream-"): v.decode("utf-8", "replace") for k, v in headers.items()},
                    original_base64=None if entry.value is None else base64.b64encode(entry.value).decode(),
                    preview=preview(entry.value),
                )
            )
        return DeadLetterList(entries=entries, complete=complete)

    return api
