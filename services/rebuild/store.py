"""Postgres memory from `memory.changes`: every change's record (and vector) upserted in log order.

The public log carries the full record after every change, so replaying it
from the beginning re-creates the `memories` table as it stood. Each change
goes through the consolidator's own upsert (MemoryWriter.upsert), so the row
is written exactly as the live path writes it; a `forgotten` message deletes
the user everywhere, as forgetting did (services/stores/postgres/forget.py),
except their data key (below).

Keys. Changes are sealed per user (services/archive/changes.py), so the
rebuild needs what every reader of the topic needs: the master key (loaded,
never created: a new one could open nothing) and the `user_keys` rows (one
lookup per batch). Those rows live in Postgres: after losing the whole
database they come from a backup, or the old database, with `keys_from`
(`--keys-from DSN`), which copies them in first; the rebuilt database needs
them anyway, for the archive and for sealing the users' next changes. A
database with no key at all is refused (StackError) rather than rebuilt
empty. A change whose key is gone is a forgotten user's: skipped and counted
(`skipped_forgotten`), never an error. Replaying a `forgotten` message
deletes the user's rows and their keys created before the forget was
committed (a key restored from a backup older than the forget stays
forgotten), and keeps a key created after it: the user came back, and
deleting that key would make their later changes and archive unreadable.

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

from schemas import MemoryChange
from schemas.commands import UserForgotten
from services.archive.changes import FORGOTTEN, MALFORMED, UNREADABLE, open_changes
from services.archive.keys import KeyStore
from services.core import topics
from services.core.config import Settings
from services.core.errors import StackError, StoreRejected
from services.kafka.log_end import EndDetector, read_to_end
from services.rebuild.progress import Progress
from services.stores.postgres import Conn, MemoryWriter, PgPool, migrate
from services.stores.postgres.forget import forget_user
from services.stores.postgres.locks import lock_users

log = logging.getLogger("memstream.rebuild")

Change = MemoryChange | UserForgotten
_KEY_COLUMNS = "tenant_id, user_id, key_id, wrapped_key, master_key_id, created_at"
USER_KEYS = "user_keys"


@dataclass
class StoreTally:
    """What a store rebuild did, message by message."""

    messages: int = 0
    applied: int = 0
    older: int = 0  # a newer version of the record was already stored
    forgotten: int = 0  # `forgotten` messages applied
    rejected: int = 0  # the id belongs to another tenant or user
    undecodable: int = 0  # not a memory.changes message
    skipped_forgotten: int = 0  # a change whose user's key is gone: a forgotten user's
    unreadable: int = 0  # a change that does not open with its user's key

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


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
            await forget_user(conn, change.tenant_id, change.user_id, keep=(USER_KEYS,))
            await conn.execute(
                "DELETE FROM user_keys WHERE tenant_id = %s AND user_id = %s AND created_at <= %s",
                (change.tenant_id, change.user_id, change.committed_at),
            )
            # Its rows are gone: a later change of one of them is new again.
            stored = {k: v for k, v in stored.items() if k not in _ids_of(changes, change)}
            tally.forgotten += 1
            continue
        record = change.record
        if stored.get(record.id, 0) > record.version:
            tally.older += 1
            continue
        try:
            await writer.upsert(conn, record, change.vector, change.context_vector)
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
    pool: PgPool, batches: AsyncIterable[Sequence[bytes | None]], keys: KeyStore, tally: StoreTally | None = None
) -> StoreTally:
    """Every batch of raw `memory.changes` values opened with `keys`, then applied in its own transaction, in order."""
    tally = tally or StoreTally()
    writer = MemoryWriter()
    async for raw in batches:
        changes, skipped = await open_changes(keys, raw)
        tally.undecodable += skipped[MALFORMED]
        tally.skipped_forgotten += skipped[FORGOTTEN]
        tally.unreadable += skipped[UNREADABLE]
        async with pool.transaction("rebuild_store") as conn:
            await lock_users(conn, {(c.tenant_id, c.user_id) for c in changes})
            await apply_changes(writer, conn, changes, tally)
        tally.messages += len(raw)
    return tally


async def restore_keys(pool: PgPool, source_dsn: str) -> int:
    """Copy every user's wrapped data key from the database at `source_dsn` into `pool`'s; keys there stay.

    Wrapped keys are copied as they are: they open with the same master key only.
    """
    source = PgPool(source_dsn, 1, pool_timeout=30.0)
    await source.open()
    try:
        async with source.connection("user_keys_backup") as conn:
            cur = await conn.execute(f"SELECT {_KEY_COLUMNS} FROM user_keys")
            rows = [tuple(r.values()) for r in await cur.fetchall()]
    finally:
        await source.close()
    async with pool.transaction("user_keys_restore") as conn, conn.cursor() as cur:
        await cur.executemany(
            f"INSERT INTO user_keys ({_KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING", rows
        )
    return len(rows)


async def require_keys(pool: PgPool) -> None:
    """StackError unless some user has a data key here: without keys a rebuild would skip every change."""
    async with pool.connection("user_keys_count") as conn:
        cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM user_keys) AS any")
        row = await cur.fetchone()
    if not (row and row["any"]):
        raise StackError(
            "no user has a data key in the database to rebuild: memory.changes is sealed per user, so nothing "
            "could be opened. "
            "Restore the user_keys table from a backup, or give the old database with --keys-from DSN"
        )


async def rebuild_store(
    settings: Settings,
    progress: Progress,
    *,
    topic: str = topics.CHANGES,
    settle: float = 1.0,
    idle: float = 10.0,
    keys_from: str | None = None,
) -> tuple[StoreTally, str]:
    """Replay `topic` from its beginning into the Postgres of `settings`; the tally and how the end was found.

    Migrations run first, so a lost database gets its tables back; `keys_from` names a database (a backup, the
    old one) whose users' data keys are copied in first (see the module doc).
    """
    await migrate(settings.pg_dsn)
    pool = PgPool(settings.pg_dsn, 2, connect_timeout=settings.pg_connect_timeout, pool_timeout=30.0)
    keys = KeyStore.from_settings(pool, settings)  # before reading anything: no master key, no rebuild
    detector = EndDetector(settle=settle, idle=idle)

    async def batches() -> AsyncIterator[list[bytes | None]]:
        def grew(total: int) -> None:
            progress.advance(0, total=total)

        async for messages in read_to_end(settings, topic, detector=detector, on_total=grew):
            yield [m.value for m in messages]
            progress.advance(len(messages))

    await pool.open()
    try:
        if keys_from is not None:
            log.info("copied %d users' data keys from the database given", await restore_keys(pool, keys_from))
        await require_keys(pool)
        tally = await apply_stream(pool, batches(), keys)
    finally:
        await pool.close()
    return tally, detector.reason
