"""Per-user data keys in Postgres (table user_keys), wrapped by the master key, unwrapped once per process.

Every lookup still asks Postgres which key a user has *now* (one query per
batch, never per turn): a user forgotten by another process has no row, so a
cached key of theirs is dropped instead of sealing new turns with a key that
no longer exists. What the cache saves is the unwrap, and it bounds how many
unwrapped keys a process holds.

Deleting a user's row is the forgetting: `forget_user`
(services/stores/postgres/forget.py) deletes from every table with tenant_id
and user_id columns, this one included; `KeyStore.forget` does the same for
this table alone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from services.archive.codec import DataKey, MasterKey, RecordRejected, new_data_key, unwrap, wrap
from services.archive.master import load_master_key
from services.core.config import Settings
from services.core.errors import StoreRejected, StoreUnavailable
from services.stores.postgres.pool import Conn, PgPool

Owner = tuple[str, str]  # (tenant_id, user_id)


class MasterKeyMismatch(StoreUnavailable):
    """A key wrapped by another master key: this process was given the wrong one.

    Not bad data, so never a reason to dead-letter a turn: the stage retries
    (and logs this) until the process is restarted with the right key.
    """


class KeyStore:
    def __init__(self, pool: PgPool, master: MasterKey, cache_size: int = 10_000) -> None:
        self._pool = pool
        self._master = master
        self._cache_size = max(cache_size, 1)
        self._cache: OrderedDict[Owner, DataKey] = OrderedDict()

    @classmethod
    def from_settings(cls, pool: PgPool, settings: Settings, *, create_master: bool = False) -> KeyStore:
        """With the configured master key; only the archive's writer may create one (see services.archive.master)."""
        return cls(pool, load_master_key(settings, create=create_master), settings.archive_key_cache_size)

    async def for_writing(self, conn: Conn, owners: Iterable[Owner]) -> dict[Owner, DataKey]:
        """Each owner's data key, created in the caller's transaction for owners who have none yet.

        Two processes creating one user's key at once end with one key: the
        second insert waits for the first and yields to it.
        """
        wanted = set(owners)
        found = await self._current(conn, wanted)
        missing = wanted - found.keys()
        if missing:
            fresh = [new_data_key(tenant, user) for tenant, user in sorted(missing)]
            async with conn.cursor() as cur:
                await cur.executemany(
                    """INSERT INTO user_keys (tenant_id, user_id, key_id, wrapped_key, master_key_id)
                       VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, user_id) DO NOTHING""",
                    [(k.tenant_id, k.user_id, k.key_id, wrap(self._master, k), self._master.key_id) for k in fresh],
                )
            found |= await self._current(conn, missing)
        return found

    async def get_or_create(self, tenant_id: str, user_id: str) -> DataKey:
        async with self._pool.transaction("user_key_create") as conn:
            return (await self.for_writing(conn, [(tenant_id, user_id)]))[(tenant_id, user_id)]

    async def current(self, owners: Iterable[Owner]) -> dict[Owner, DataKey]:
        """The keys these owners have now; a forgotten owner (or one never seen) is absent."""
        wanted = set(owners)
        if not wanted:
            return {}
        async with self._pool.connection("user_keys_load") as conn:
            return await self._current(conn, wanted)

    async def forget(self, conn: Conn, tenant_id: str, user_id: str) -> bool:
        """Delete the user's key in the caller's transaction: their archived records can never be opened again."""
        self._cache.pop((tenant_id, user_id), None)
        cur = await conn.execute("DELETE FROM user_keys WHERE tenant_id = %s AND user_id = %s", (tenant_id, user_id))
        return cur.rowcount > 0

    async def _current(self, conn: Conn, owners: set[Owner]) -> dict[Owner, DataKey]:
        if not owners:
            return {}
        ordered = sorted(owners)
        cur = await conn.execute(
            """SELECT tenant_id, user_id, key_id, wrapped_key, master_key_id FROM user_keys
               WHERE (tenant_id, user_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))""",
            ([t for t, _ in ordered], [u for _, u in ordered]),
        )
        found = {(str(r["tenant_id"]), str(r["user_id"])): self._unwrapped(r) for r in await cur.fetchall()}
        for gone in owners - found.keys():
            self._cache.pop(gone, None)
        return found

    def _unwrapped(self, row: dict[str, Any]) -> DataKey:
        owner = (str(row["tenant_id"]), str(row["user_id"]))
        cached = self._cache.get(owner)
        if cached is not None and cached.key_id == row["key_id"]:
            self._cache.move_to_end(owner)
            return cached
        if row["master_key_id"] != self._master.key_id:
            raise MasterKeyMismatch(
                f"the data key of {owner} was wrapped by master key {row['master_key_id']}, this process has "
                f"{self._master.key_id}: give every process the same MEMSTREAM_MASTER_KEY"
            )
        try:
            key = unwrap(self._master, owner[0], owner[1], str(row["key_id"]), bytes(row["wrapped_key"]))
        except RecordRejected as exc:
            raise StoreRejected(str(exc)) from None
        self._cache[owner] = key
        self._cache.move_to_end(owner)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return key
