"""The serving generation's Qdrant Edge shard, kept current by the read service itself.

A shard has one owner. While a generation other than the default serves, the
read service holds its shard (services/api/serving.py), so no worker can run
that generation's index stage: the read service does, here. It consumes the
generation's `memory.changes.g-<name>` with that generation's index consumer
group, so it starts where the rebuild's worker stopped, and applies each
batch exactly as the index stage does (agents/qdrant_sink.apply_changes),
committing only after the shard has it: a restart re-applies at most one
batch, which the index absorbs (upserts and deletes are idempotent).

With a Qdrant server there is no follower: the generation's worker runs its
own index stage against the server's collection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from services.core import generations, metrics
from services.core.config import Settings
from services.core.errors import StoreUnavailable
from services.core.kafka_auth import aiokafka_kwargs
from services.core.stages import INDEX_STAGE, group_id
from services.runtime import Runtime

log = logging.getLogger(__name__)
STAGE = "index_follower"


def follows(settings: Settings) -> bool:
    """Whether the read service must feed a generation's index: only an embedded shard needs it."""
    return settings.qdrant_url is None


async def follow_index(rt: Runtime, scoped: Settings, *, max_delay: float = 30.0) -> None:
    """Apply the generation's changes to `rt.index` until cancelled (`rt` is the generation's view).

    A broker outage ends a consumer; another starts after a pause, from the group's committed offsets.
    """
    while True:
        try:
            await _follow(rt, scoped, max_delay)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: stopped (%s); starting again in 5s", STAGE, exc)
            await asyncio.sleep(5.0)


async def _follow(rt: Runtime, scoped: Settings, max_delay: float) -> None:
    from aiokafka import AIOKafkaConsumer

    from agents.qdrant_sink.agent import apply_changes

    gen = generations.of(scoped)
    consumer = AIOKafkaConsumer(
        gen.topic("changes"),
        bootstrap_servers=scoped.kafka_bootstrap,
        group_id=group_id(scoped.app_id, INDEX_STAGE),
        client_id=f"memstream-{STAGE}-{gen.name}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=scoped.fetch_max_wait_ms,
        **aiokafka_kwargs(scoped),
    )
    await consumer.start()
    log.info("read service feeds generation %s's index from %s", gen.name, gen.topic("changes"))
    try:
        while True:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=scoped.consolidate_batch_size)
            records: Sequence[Any] = [r for batch in fetched.values() for r in batch]
            if not records:
                continue
            changes = await _open(rt, [r.value for r in records])
            await _apply_until_done(rt, changes, max_delay, apply_changes)
            await consumer.commit()
            metrics.EVENTS_IN.labels(stage=STAGE).inc(len(records))
    finally:
        await consumer.stop()


async def _open(rt: Runtime, values: Sequence[bytes | None]) -> list[Any]:
    """The batch opened with its users' keys (services/archive/changes.py); what does not open is counted, passed over."""
    from services.archive.changes import open_changes

    changes, skipped = await open_changes(rt.keys, values)
    for reason, count in skipped.items():
        metrics.CHANGES_SKIPPED.labels(stage=STAGE, reason=reason).inc(count)
    return changes


async def _apply_until_done(rt: Runtime, changes: Sequence[Any], max_delay: float, apply: Any) -> None:
    """An index outage is waited out (nothing committed meanwhile); anything else is logged and passed over."""
    delay = 0.5
    while True:
        try:
            await apply(rt, changes)
            return
        except StoreUnavailable as exc:
            log.warning("%s: index unavailable, retrying in %.1fs: %s", STAGE, delay, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
        except Exception:
            # Postgres stays right; `memstream rebuild index` re-creates the shard from it.
            metrics.STAGE_ERRORS.labels(stage=STAGE).inc(len(changes))
            log.exception("%s: a batch of %d changes could not be indexed", STAGE, len(changes))
            return
