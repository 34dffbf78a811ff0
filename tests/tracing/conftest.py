"""Tracing tests: each starts with tracing off and the OTLP environment unset, and ends it off again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from services.core import tracing
from services.kafka.producer import Delivered, TurnProducer

OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture(autouse=True)
def tracing_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    tracing.shutdown()
    yield
    tracing.shutdown()


@dataclass
class RecordingProducer:
    """Stands in for librdkafka's AsyncProducer under a real TurnProducer: records what would be produced."""

    sent: list[tuple[str, bytes, bytes, list[tuple[str, bytes]] | None]] = field(default_factory=list)

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None = None
    ) -> asyncio.Future[Delivered]:
        self.sent.append((topic, key, value, headers))
        done: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        done.set_result(Delivered(partition=0, offset=len(self.sent) - 1))
        return done


def recording_turn_producer() -> tuple[TurnProducer, RecordingProducer]:
    """A TurnProducer whose sends are recorded instead of produced (no broker)."""
    producer = TurnProducer("127.0.0.1:1")
    recorder = RecordingProducer()
    producer._producer = recorder  # type: ignore[assignment]
    return producer, recorder


# The live read service of tests/api (embedded Postgres, a Kafka that never answers), for the route spans.
from tests.api.conftest import api, api_pg, silent_kafka  # noqa: E402, F401
