"""Reading `memory.changes` in tests the way subscribers do: through the shared opener (services/archive/changes.py).

The topic carries sealed envelopes; these helpers open them with the users'
keys and hand back each change as JSON (what `memstream changes` prints).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from services.archive.changes import open_changes
from services.archive.keys import KeyStore
from services.core import topics
from services.core.config import Settings
from services.kafka.log_tail import follow_topic
from services.stores.postgres import PgPool


async def opened(keys: KeyStore, values: Iterable[bytes | None]) -> list[dict[str, Any]]:
    """Every value that opens, in order, as JSON; forgotten users' changes left out."""
    changes, _ = await open_changes(keys, values)
    return [c.model_dump(mode="json") for c in changes]


async def stack_changes(
    settings: Settings, done: Callable[[list[dict[str, Any]]], bool], within: float = 30.0
) -> list[dict[str, Any]]:
    """A running stack's memory.changes from the beginning, opened, until `done(found)` or `within` seconds pass."""
    pool = PgPool(settings.pg_dsn, 2)
    keys = KeyStore.from_settings(pool, settings)
    found: list[dict[str, Any]] = []

    async def read() -> None:
        async for batch in follow_topic(settings, topics.CHANGES, from_beginning=True):
            found.extend(await opened(keys, [m.value for m in batch]))
            if done(found):
                return

    await pool.open()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read(), within)
    finally:
        await pool.close()
    return found
