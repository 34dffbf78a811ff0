"""`memstream maintain`: one pass outside the worker, with its own pool and Kafka producer.

It opens Postgres only (no vector index, no model): maintenance needs the
stored embeddings, not new ones, and an embedded index belongs to the worker.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from functools import partial
from typing import Any

from aiokafka import AIOKafkaProducer

from agents.dlq import DeadLetters
from agents.maintenance.rules.config import Rules
from agents.maintenance.run import run_pass
from agents.maintenance.synthesis import LLM_INVALID_OUTPUT, llm_synthesis
from agents.outbox import publish
from services.archive.keys import KeyStore
from services.core import topics
from services.core.config import Settings
from services.core.kafka_auth import aiokafka_kwargs
from services.llm import LlmClient
from services.stores.postgres import Outbox, PgPool, migrate


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

    # The worker's publisher over this producer; a failure leaves the rows to the worker's relay.
    by_name = {name: _ProducerTopic(producer, name) for name in topics.BY_ROLE.values()}
    publish_changes = partial(publish, outbox, by_name, "maintenance")
    # Sealing each user's changes (and dead letters) needs their data keys: a writer, so it may create the master key file.
    keys = KeyStore.from_settings(pool, settings, create_master=True)
    llm = LlmClient.from_settings(settings)
    synthesis = None
    if llm is not None:
        dlq = DeadLetters(by_name[topics.DLQ], settings.max_message_bytes, keys)

        async def dead_letter(key: bytes, value: bytes, error: str) -> None:
            await dlq.send_value(key, value, stage="maintenance", reason=LLM_INVALID_OUTPUT, error=error)

        synthesis = llm_synthesis(llm, dead_letter)

    await pool.open()
    await producer.start()
    try:
        rules = Rules.from_settings(settings)
        return await run_pass(pool, outbox, rules, now, publish_changes, tenant_id, user_id, synthesis, keys=keys)
    finally:
        await producer.stop()
        await pool.close()
        if llm is not None:
            await llm.close()


class _ProducerTopic:
    """A topic as the outbox's publisher and DeadLetters see one, over this command's own producer."""

    def __init__(self, producer: AIOKafkaProducer, name: str) -> None:
        self._producer = producer
        self._name = name

    async def send(self, *, key: bytes | None, value: bytes | None, headers: dict[str, bytes] | None = None) -> Any:
        """The delivery future: the broker's acknowledgement, awaited by the caller."""
        listed = list(headers.items()) if headers else None
        return await self._producer.send(self._name, key=key, value=value, headers=listed)
