"""Postgres memory from `memory.changes`: every change's record (and vector) upserted in log order.

The public log carries the full record after every change, so replaying it
from the beginning re-creates the `memories` table as it stood. Each change
goes through the consolidator's own upsert (MemoryWriter.upsert), so the row
is written exactly as the live path writes it; a `forgotten` message deletes
the user everywhere, as forgetting did (services/stores/postgres/forget.py).

Idempotent: a change older than the row it would write (a lower `version`)
is skipped, so running the rebuild again over a store it already filled, or
over one the consolidator kept writing, converges to the log's latest state
instead of taking a record back in time. Order: the log's, per partition,
which is per user (every topic is keyed tenant:user), applied one fetched
batch per transaction.

What the log cannot bring back: raw turns, sessions and working windows,
session summaries and applied-command marks (not on `memory.changes`:
a generation rebuilt from the archive re-derives them), the `export_id` an
imported memory was given, and the embedding of a row that was written
already retired (a merge's losing candidate: its change carries no vector).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from schemas import MemoryChange
from schemas.commands import ChangeMessage, UserForgotten
from services import topics
from services.config import Settings
from services.errors import StoreRejected
from services.rebuild.log_end import EndDetector, read_to_end
from services.rebuild.progress import Progress
from services.stores.postgres import Conn, MemoryWriter, PgPool, migrate
from services.stores.postgres.forget import forget_user

log = logging.getLogger("memstream.rebuild")

Change = MemoryChange | UserForgotten


@dataclass
class StoreTally:
    """What a store rebuild did, message by message."""

    messages: int = 0
    applied: int = 0
    older: int = 0  # a newer version of the record was already stored
    forgotten: int = 0
    rejected: int = 0  # the id belongs to another tenant or user
    undecodable: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def decode(value: bytes | None) -> Change | None:
    """A `memory.changes` message, or None when it is not one (counted, never applied)."""
    if value is None:
        return None
    try:
        return ChangeMessage.model_validate_json(value).root
    except ValidationError:
        return None


async def _stored_versions(conn: Conn, changes: Sequence[Change]) -> dict[str, int]:
    """The stored version of each record the batch changes, looked up by (tenant, user, id) in one query."""
    keys = {(c.tenant_id, c.user_id, c.record.id) for c in changes if isinstance(c, MemoryChange)}
    if not keys:
        return {}
    tenants, users, ids = (list(column) for column in zip(*sorted(keys), strict=True))
    cur = await conn.execute(
        """SELECT m.id, m.version FROM memories m
           JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(t, u, id)
             ON m.tenant_id = k.t AND m.user_id = k.u AND m.id = k.id""",
        (tenants, users, ids),
    )
    return {r["id"]: int(r["version"]) for r in await cur.fetchall()}


async def apply_changes(writer: MemoryWriter, conn: Conn, changes: Sequence[Change], tally: StoreTally) -> None:
    """Apply in order, in the caller's transaction (see the module doc for what is skipped)."""
    stored = await _stored_versions(conn, changes)
    for change in changes:
        if isinstance(change, UserForgotten):
            await forget_user(conn, change.tenant_id, change.user_id)
            # Its rows are gone: a later change of one of them is new again.
            stored = {k: v for k, v in stored.items() if k not in _ids_of(changes, change)}
            tally.forgotten += 1
            continue
        record = change.record
        if stored.get(record.id, 0) > record.version:
            tally.older += 1
            continue
        try:
            await writer.upsert(conn, record, change.vector)
        except StoreRejected as exc:
            # Raised after a statement that changed nothing: the transaction is intact.
            log.warning("change of %s v%d not applied: %s", record.id, record.version, exc)
            tally.rejected += 1
            continue
        stored[record.id] = record.version
        tally.applied += 1


def _ids_of(changes: Sequence[Change], gone: UserForgotten) -> set[str]:
    return {
        c.record.id
        for c in changes
        if isinstance(c, MemoryChange) and (c.tenant_id, c.user_id) == (gone.tenant_id, gone.user_id)
    }


async def apply_stream(
    pool: PgPool, batches: AsyncIterable[Sequence[bytes | None]], tally: StoreTally | None = None
) -> StoreTally:
    """Every batch of raw `memory.changes` values in its own transaction, in order."""
    tally = tally or StoreTally()
    writer = MemoryWriter()
    async for raw in batches:
        changes: list[Change] = []
        for value in raw:
            change = decode(value)
            if change is None:
                tally.undecodable += 1
            else:
                changes.append(change)
        async with pool.transaction("rebuild_store") as conn:
            await apply_changes(writer, conn, changes, tally)
        tally.messages += len(raw)
    return tally


async def rebuild_store(
    settings: Settings, progress: Progress, *, topic: str = topics.CHANGES, settle: float = 1.0, idle: float = 10.0
) -> tuple[StoreTally, str]:
    """Replay `topic` from its beginning into the Postgres of `settings`; the tally and how the end was found.

    Migrations run first, so a lost database gets its tables back.
    """
    await migrate(settings.pg_dsn)
    pool = PgPool(settings.pg_dsn, 2, connect_timeout=settings.pg_connect_timeout, pool_timeout=30.0)
    await pool.open()
    detector = EndDetector(settle=settle, idle=idle)

    async def batches() -> AsyncIterator[list[bytes | None]]:
        def grew(total: int) -> None:
            progress.advance(0, total=total)

        async for messages in read_to_end(settings, topic, detector=detector, on_total=grew):
            yield [m.value for m in messages]
            progress.advance(len(messages))

    try:
        tally = await apply_stream(pool, batches())
    finally:
        await pool.close()
    return tally, detector.reason
