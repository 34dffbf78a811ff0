"""HTTP ingest: `POST /v1/turns` puts chat events on `chat.turns` for services that do not speak Kafka.

The body is one event or a JSON array of up to MAX_EVENTS, each exactly the
Kafka contract (schemas/json/turn_event.schema.json, session_event.schema.json)
and checked by the same function the window stage applies to what it reads
from Kafka (services.core.ingest.parse_chat_event), so HTTP accepts what the pipeline
accepts, and says at once what it would have sent to the DLQ.

A request is all or nothing as far as validation goes: one bad event and
nothing is produced (422, every bad event listed by its index in `loc`).
Delivery is at least once: 202 means the broker acknowledged every event; 503
means it did not acknowledge all of them in time, and some may still have
been written. Sending the same batch again is safe: the pipeline applies an
event id once (the archive tells a redelivery from a new event).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, FastAPI
from fastapi.exceptions import RequestValidationError
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ConfigDict, Field, JsonValue, PlainValidator, RootModel
from pydantic.config import JsonDict

from schemas import SessionEvent, TurnEvent
from services.api.jsonbody import StrictJsonRoute
from services.core import tracing
from services.core.config import Settings
from services.core.errors import InvalidEvent, StoreUnavailable
from services.core.ingest import parse_chat_event
from services.core.kafka_auth import confluent_config
from services.kafka.producer import ProduceFailed, ProducerSlot, TurnProducer

log = logging.getLogger(__name__)

MAX_EVENTS = 1_000
TAG = "ingest"


_EXAMPLE: JsonDict = {
    "event_id": "e-1",
    "tenant_id": "acme",
    "user_id": "u-42",
    "session_id": "s-7",
    "turn_index": 0,
    "role": "user",
    "content": "I take my coffee black.",
    "ts": "2025-03-14T09:26:53Z",
}

_BATCH_EXAMPLE: list[JsonValue] = [
    _EXAMPLE,
    {**_EXAMPLE, "event_id": "e-2", "turn_index": 1, "role": "assistant", "content": "Noted."},
    # A session_end names its type: an event without one is a turn.
    {
        "type": "session_end",
        "event_id": "e-3",
        "tenant_id": "acme",
        "user_id": "u-42",
        "session_id": "s-7",
        "ts": "2025-03-14T09:31:02Z",
    },
]


class Accepted(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"accepted": 2}]})

    accepted: int = Field(description="Events the broker acknowledged (all of the request's)")


class TurnSink:
    """The read service's producer on `chat.turns`: started with the app, replaced if it breaks for good.

    Idempotent (services.kafka.producer), so librdkafka's own retries after a lost
    acknowledgement write nothing twice. A server run without lifespan
    events (tests) starts it on the first ingest instead.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._slot = ProducerSlot(
            lambda: TurnProducer(
                settings.kafka_bootstrap, message_timeout=settings.ingest_ack_timeout, config=confluent_config(settings)
            )
        )

    async def warm(self) -> None:
        """Start the producer now, so its producer id is granted before the first request needs it (~0.5 s)."""
        try:
            await self._slot.current()
        except Exception:  # a bad setting surfaces on the first ingest as a 503; the service still starts
            log.exception("ingest producer could not start")

    async def deliver(self, events: list[TurnEvent | SessionEvent]) -> None:
        """Returns once the broker acknowledged every event; StoreUnavailable when it did not within the timeout."""
        producer = await self._slot.current()
        try:
            await asyncio.wait_for(producer.send_events(events), self._settings.ingest_ack_timeout)
        except (TimeoutError, ProduceFailed) as exc:
            raise StoreUnavailable(f"chat.turns: {len(events)} events not acknowledged: {exc!r}") from exc

    async def close(self) -> None:
        await self._slot.close()


def validated(body: Any, settings: Settings) -> list[TurnEvent | SessionEvent]:
    """Every event of the body, or RequestValidationError listing each bad one (`loc`: body, index)."""
    batch = isinstance(body, list)
    items = body if batch else [body]
    if batch and not 1 <= len(items) <= MAX_EVENTS:
        raise RequestValidationError(
            [
                {
                    "type": "batch_size",
                    "loc": ("body",),
                    "msg": f"a batch holds 1 to {MAX_EVENTS} events, got {len(items)}",
                }
            ]
        )
    events: list[TurnEvent | SessionEvent] = []
    problems: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = ("body", index) if batch else ("body",)
        try:
            events.append(
                parse_chat_event(
                    orjson.dumps(item), max_content_bytes=settings.max_content_bytes, tenants=settings.tenants
                )
            )
        except InvalidEvent as exc:
            problems.append({"type": exc.reason, "loc": where, "msg": exc.message})
    if problems:
        raise RequestValidationError(problems)
    return events


_EVENT = TurnEvent | SessionEvent


def _as_sent(value: Any) -> Any:
    """The body reaches `validated` as parsed JSON: each event is checked there, with its index."""
    return value


# Never validated (see `_as_sent`): it only names the body's schema in the document, the
# contract's own schemas, so clients and schemathesis see exactly what `validated` accepts.
class TurnsBody(RootModel[_EVENT | Annotated[list[_EVENT], Field(min_length=1, max_length=MAX_EVENTS)]]):
    """One chat event (a turn, or a session_end, which must say `"type": "session_end"`), or an array of 1 to
    1,000 of them, exactly as on the `chat.turns` topic."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE, _BATCH_EXAMPLE]})


EventOrBatch = Annotated[Any, PlainValidator(_as_sent, json_schema_input_type=TurnsBody), Body()]


def router(settings: Settings) -> APIRouter:
    sink = TurnSink(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await sink.warm()
        yield
        await sink.close()

    # StrictJsonRoute like the app's own routes: strict JSON, 415 for another content type.
    api = APIRouter(lifespan=lifespan, route_class=StrictJsonRoute)

    @api.post(
        "/v1/turns",
        status_code=202,
        response_model=Accepted,
        tags=[TAG],
        summary="Send chat turns (one, or a batch of up to 1,000) to chat.turns, as a Kafka producer would",
    )
    async def ingest(body: EventOrBatch) -> Accepted:
        with tracing.tracer().start_as_current_span("ingest turns", kind=SpanKind.SERVER) as span:
            events = validated(body, settings)
            span.set_attribute(tracing.EVENTS, len(events))
            await sink.deliver(events)
            return Accepted(accepted=len(events))

    return api
