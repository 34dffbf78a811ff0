"""`memstream maintain`: one pass outside the worker, with its own pool and Kafka producer.

It opens Postgres only (no vector index, no model): maintenance needs the
stored embeddings, not new ones, and an embedded index belongs to the worker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from agents.dlq import DeadLetters
from agents.maintenance.logic import Rules
from agents.maintenance.run import run_pass
from agents.maintenance.synthesis import LLM_INVALID_OUTPUT, llm_synthesis
from services.archive.keys import KeyStore
from services.core import topics
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs
from services.llm import LlmClient
from services.stores.postgres import Outbox, OutboxMessage, PgPool, migrate


async def maintain_once(settings: Settings, now: datetime, tenant_id: str | None, user_id: str | None) -> Counter[str]:
    await migrate(settings.pg_dsn)
    pool = PgPool(
        settings.pg_dsn,
        2,
        connect_timeout=settings.pg_connect_timeout,
        pool_timeout=settings.pg_pool_timeout,
    )
    outbox = Outbox(pool)
    # aiokafka's idempotent producer fails against the embedded broker; outbox rows make re-sends harmless.
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        acks="all",
        linger_ms=5,
        max_request_size=settings.max_message_bytes + 64 * 1024,
        **aiokafka_kwargs(settings),
    )

    async def publish(messages: Sequence[OutboxMessage]) -> None:
        """Send all, wait once, then forget the rows; a failure leaves them to the worker's relay."""
        unique = list({m.id: m for m in messages}.values())
        pending = [await producer.send(m.topic, key=m.key, value=m.value) for m in unique]
        for fut in pending:
            await fut
        await outbox.delete([m.id for m in unique])

    # Sealing each user's changes (and dead letters) needs their data keys: a writer, so it may create the master key file.
    keys = KeyStore.from_settings(pool, settings, create_master=True)
    llm = LlmClient.from_settings(settings)
    synthesis = None
    if llm is not None:
        dlq = DeadLetters(_ProducerTopic(producer, topics.DLQ), settings.max_message_bytes, keys)

        async def dead_letter(key: bytes, value: bytes, error: str) -> None:
            await dlq.send_value(key, value, stage="maintenance", reason=LLM_INVALID_OUTPUT, error=error)

        synthesis = llm_synthesis(llm, dead_letter)

    await pool.open()
    await producer.start()
    try:
        rules = Rules.from_settings(settings)
        return await run_pass(pool, outbox, rules, now, publish, tenant_id, user_id, synthesis, keys=keys)
    finally:
        await producer.stop()
        await pool.close()
        if llm is not None:
            await llm.close()


class _ProducerTopic:
    """memory.dlq as DeadLetters sees a topic, over this command's own producer."""

    def __init__(self, producer: AIOKafkaProducer, name: str) -> None:
        self._producer = producer
        self._name = name

    async def send(self, *, key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> Any:
        return await self._producer.send(self._name, key=key, value=value, headers=list(headers.items()))
