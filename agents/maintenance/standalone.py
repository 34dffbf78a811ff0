"""`memstream maintain`: one pass outside the worker, with its own pool and Kafka producer.

It opens Postgres only (no vector index, no model): maintenance needs the
stored embeddings, not new ones, and an embedded index belongs to the worker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from aiokafka import AIOKafkaProducer

from agents.maintenance.logic import Rules
from agents.maintenance.run import run_pass
from services.config import Settings
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
    # No idempotent producer: the embedded broker rejects InitProducerId (see services.producer).
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        acks="all",
        linger_ms=5,
        max_request_size=settings.max_message_bytes + 64 * 1024,
    )

    async def publish(messages: Sequence[OutboxMessage]) -> None:
        """Send all, wait once, then forget the rows; a failure leaves them to the worker's relay."""
        unique = list({m.id: m for m in messages}.values())
        pending = [await producer.send(m.topic, key=m.key, value=m.value) for m in unique]
        for fut in pending:
            await fut
        await outbox.delete([m.id for m in unique])

    await pool.open()
    await producer.start()
    try:
        return await run_pass(pool, outbox, Rules.from_settings(settings), now, publish, tenant_id, user_id)
    finally:
        await producer.stop()
        await pool.close()
