"""A Python producer helper for chat services that do not speak Kafka themselves."""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from aiokafka import AIOKafkaProducer

from schemas import SessionEvent, TurnEvent, dumps, partition_key
from services import topics

TURNS_TOPIC = topics.TURNS


def key_of(raw: bytes) -> bytes:
    """tenant:user from a raw message, or b"unknown" when it is not parseable."""
    try:
        data = orjson.loads(raw)
        return partition_key(str(data["tenant_id"]), str(data["user_id"]))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return b"unknown"


class TurnProducer:
    """`async with TurnProducer(bootstrap) as p: await p.send(turn)`."""

    def __init__(self, bootstrap: str, topic: str = TURNS_TOPIC) -> None:
        # No idempotent producer: the embedded broker rejects InitProducerId.
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self._topic = topic

    async def __aenter__(self) -> TurnProducer:
        await self._producer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._producer.stop()

    async def send(self, event: TurnEvent | SessionEvent) -> None:
        await self._producer.send_and_wait(self._topic, key=event.key, value=dumps(event))

    async def send_raw(self, lines: Iterable[bytes]) -> int:
        """Sends bytes as they are (validation is the pipeline's job); returns the count."""
        futures = [await self._producer.send(self._topic, key=key_of(line), value=line) for line in lines]
        for fut in futures:
            await fut
        return len(futures)
