"""The read service's two ends of a memory command: producing it, and (`?wait=true`) seeing it take effect.

Producing: idempotently through librdkafka (services.kafka.producer), keyed
`tenant:user`, and only answered once the broker acknowledged every part; a
broker that does not acknowledge in time is a 503, like any store outage.

Waiting polls the stores rather than watching `memory.changes`: the commands
stage records what each command changed beside its idempotency claim, and the
wait is over when every changed record is at that version in the index too
(or out of it). Any read service replica can answer that, with no consumer of
its own. A forgotten user is waited for as no row in any table and no index point.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from schemas import dumps
from schemas.commands import AnyCommand
from services.core import topics, tracing
from services.core.config import Settings
from services.core.errors import StoreUnavailable
from services.core.kafka_auth import confluent_config
from services.kafka.producer import AsyncProducer, ProduceFailed, ProducerSlot, acknowledged, producer_config
from services.runtime import Runtime
from services.stores.postgres.commands import CommandStore
from services.stores.postgres.forget import holds_user

log = logging.getLogger(__name__)

_FIRST_POLL = 0.02
_MAX_POLL = 0.2


class CommandLog:
    """The producer on `memory.commands`: started by the first command, replaced if it breaks for good."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._slot = ProducerSlot(
            lambda: AsyncProducer(
                producer_config(
                    settings.kafka_bootstrap,
                    message_timeout=settings.command_ack_timeout,
                    extra=confluent_config(settings),
                )
            )
        )

    async def send(self, commands: Sequence[AnyCommand]) -> None:
        """Every command, in order, acknowledged by the broker; StoreUnavailable when not within the timeout."""
        producer = await self._slot.current()
        try:
            headers = tracing.outgoing_headers()  # the route's span, for the commands stage to link to
            pending = [await producer.send(topics.COMMANDS, c.key, dumps(c), headers) for c in commands]
            await asyncio.wait_for(acknowledged(pending), self._settings.command_ack_timeout)
        except (TimeoutError, ProduceFailed) as exc:
            raise StoreUnavailable(f"memory.commands: {len(commands)} commands not acknowledged: {exc!r}") from exc

    async def close(self) -> None:
        await self._slot.close()


def _latest(changes: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per record, the highest version the commands left it at."""
    latest: dict[str, dict[str, Any]] = {}
    for change in changes:
        held = latest.get(change["id"])
        if held is None or int(change["version"]) >= int(held["version"]):
            latest[change["id"]] = change
    return latest


async def applied(
    rt: Runtime, store: CommandStore, tenant_id: str, user_id: str, command_ids: Sequence[str]
) -> list[dict[str, Any]] | None:
    """What the commands changed, once Postgres has all of them and the index shows every change; else None."""
    async with rt.pg.connection("command_outcomes") as conn:
        found = await store.outcomes(conn, tenant_id, user_id, command_ids)
    if len(found) < len(set(command_ids)):
        return None
    changes = [change for command_id in dict.fromkeys(command_ids) for change in found[command_id]]
    latest = _latest(changes)
    indexed = await rt.index.versions(tenant_id, user_id, list(latest))
    for record_id, change in latest.items():
        if change["indexed"] and indexed.get(record_id, -1) < int(change["version"]):
            return None
        if not change["indexed"] and record_id in indexed:
            return None
    return changes


async def forgotten(rt: Runtime, tenant_id: str, user_id: str) -> bool:
    async with rt.pg.connection("forgotten") as conn:
        if await holds_user(conn, tenant_id, user_id):
            return False
    return await rt.index.count_scope(tenant_id, user_id) == 0


async def wait_until_applied(
    rt: Runtime,
    store: CommandStore,
    tenant_id: str,
    user_id: str,
    command_ids: Sequence[str],
    *,
    forget: bool,
    seconds: float,
) -> list[dict[str, Any]] | None:
    """Poll (20 ms, growing to 200 ms) for up to `seconds`: the changes (empty for a forget), or None on timeout."""
    deadline = time.monotonic() + seconds
    delay = _FIRST_POLL
    while True:
        if forget:
            if await forgotten(rt, tenant_id, user_id):
                return []
        else:
            changes = await applied(rt, store, tenant_id, user_id, command_ids)
            if changes is not None:
                return changes
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, _MAX_POLL)
