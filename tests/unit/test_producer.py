"""The asyncio face of librdkafka without a broker: settings, keys, failures, and an event loop that keeps running.

Against the embedded broker: tests/e2e/test_ingest.py (idempotence granted, partitions, acknowledgements).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from services.kafka.producer import AsyncProducer, ProduceFailed, TurnProducer, key_of, producer_config
from tests.factories import turn_event


def refused_port() -> str:
    """An address nothing listens on: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_the_producer_is_idempotent_and_partitions_keys_like_the_java_client() -> None:
    config = producer_config("b:9092", message_timeout=1.5, extra={"client.id": "x"})
    assert config["enable.idempotence"] is True
    assert config["partitioner"] == "murmur2_random"
    assert config["message.timeout.ms"] == 1500
    assert config["client.id"] == "x"
    # librdkafka refuses a message timeout at or below linger.ms.
    assert producer_config("b:9092", message_timeout=0.0, linger_ms=5)["message.timeout.ms"] == 6


def test_raw_lines_are_keyed_tenant_user_or_unknown() -> None:
    assert key_of(b'{"tenant_id": "t", "user_id": "u", "x": 1}') == b"t:u"
    assert key_of(b"not json") == key_of(b"[1]") == key_of(b'{"tenant_id": "t"}') == b"unknown"


async def test_an_unreachable_broker_fails_each_send_after_the_message_timeout_without_blocking_the_loop() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        async with TurnProducer(refused_port(), message_timeout=0.5) as producer:
            started = time.monotonic()
            with pytest.raises(ProduceFailed) as failed:
                await producer.send_events([turn_event(i, f"turn {i}") for i in range(3)])
            took = time.monotonic() - started
            assert failed.value.retriable
            assert not producer.broken
            with pytest.raises(ProduceFailed):
                await producer.send_raw([b'{"tenant_id": "t", "user_id": "u"}'])
    finally:
        task.cancel()
    assert 0.4 < took < 3.0
    # The loop ran all along: about one tick per 10 ms of waiting.
    assert ticks >= took * 100 * 0.5


async def test_sending_needs_a_started_producer() -> None:
    with pytest.raises(RuntimeError, match="before start"):
        await AsyncProducer(producer_config(refused_port(), message_timeout=1.0)).send("t", b"k", b"v")
