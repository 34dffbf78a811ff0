"""Per-user data keys against a real Postgres: one key per user, wrapped at rest, and forgetting deletes it."""

from __future__ import annotations

import asyncio

import pytest

from services.archive.codec import DataKey, MasterKey, open_record, read_record, seal
from services.archive.keys import KeyStore, MasterKeyMismatch
from services.core.errors import StoreRejected
from services.stores.postgres import PgPool
from services.stores.postgres.forget import forget_user, holds_user, user_tables
from tests.stores.test_forget import turn
from tests.user_rows import rows_naming

MASTER = MasterKey(bytes(range(32)))


async def key_rows(pool: PgPool) -> list[dict[str, object]]:
    async with pool.connection("rows") as conn:
        cur = await conn.execute("SELECT * FROM user_keys ORDER BY tenant_id, user_id")
        return list(await cur.fetchall())


async def test_a_user_gets_one_key_that_every_process_with_the_master_key_opens(pool: PgPool) -> None:
    keys = KeyStore(pool, MASTER)
    first = await keys.get_or_create("t", "alice")
    assert await keys.get_or_create("t", "alice") == first
    # Another process (its own store and cache) with the same master key: the same key.
    assert await KeyStore(pool, MASTER).get_or_create("t", "alice") == first
    other = await keys.get_or_create("t", "bob")
    assert other.key_id != first.key_id
    assert other.secret != first.secret
    # At rest only wrapped, and named by the master key's digest.
    (alice, bob) = await key_rows(pool)
    assert (alice["tenant_id"], alice["user_id"], alice["key_id"]) == ("t", "alice", first.key_id)
    assert first.secret not in bytes(alice["wrapped_key"])  # type: ignore[arg-type]
    assert alice["master_key_id"] == MASTER.key_id
    assert bob["created_at"] is not None


async def test_two_writers_creating_one_users_key_at_once_end_with_one_key(pool: PgPool) -> None:
    stores = [KeyStore(pool, MASTER) for _ in range(4)]
    made = await asyncio.gather(*(s.get_or_create("t", "carol") for s in stores))
    assert len({k.key_id for k in made}) == 1
    assert len(await key_rows(pool)) == 1


async def test_a_key_made_in_a_transaction_that_rolls_back_is_not_kept(pool: PgPool) -> None:
    keys = KeyStore(pool, MASTER)
    made: dict[tuple[str, str], DataKey] = {}

    async def failing_batch() -> None:
        async with pool.transaction("rolled back") as conn:
            made.update(await keys.for_writing(conn, [("t", "dave"), ("t", "erin")]))
            raise RuntimeError("the batch failed")

    with pytest.raises(RuntimeError):
        await failing_batch()
    assert set(made) == {("t", "dave"), ("t", "erin")}
    assert await key_rows(pool) == []
    assert await keys.current([("t", "dave")]) == {}  # the cached key is not trusted without its row
    fresh = await keys.get_or_create("t", "dave")
    assert fresh.key_id != made[("t", "dave")].key_id


async def test_forgetting_a_user_deletes_their_key_and_their_records_stop_opening(pool: PgPool, pg_dsn: str) -> None:
    keys = KeyStore(pool, MASTER)
    alice, bob = await keys.get_or_create("t", "alice"), await keys.get_or_create("t", "bob")
    await keys.get_or_create("t2", "alice")
    record = read_record(seal(alice, turn("t", "alice", 0, "my secret")))
    async with pool.connection("tables") as conn:
        assert "user_keys" in await user_tables(conn)  # found by its tenant_id and user_id columns
        assert await holds_user(conn, "t", "alice")
    assert rows_naming(pg_dsn, "t", "alice") == {"user_keys": 1}

    async with pool.transaction("forget") as conn:
        assert await forget_user(conn, "t", "alice") == {"user_keys": 1}
    assert rows_naming(pg_dsn, "t", "alice") == {}
    async with pool.connection("check") as conn:
        assert not await holds_user(conn, "t", "alice")
    # The store that had alice's key cached no longer hands it out: it asks Postgres first.
    assert await keys.current([("t", "alice"), ("t", "bob"), ("t2", "alice")]) == {
        ("t", "bob"): bob,
        ("t2", "alice"): await keys.get_or_create("t2", "alice"),
    }
    # Should alice come back, she gets a new key, which does not open what the old one sealed.
    again = await keys.get_or_create("t", "alice")
    assert again.key_id != alice.key_id
    with pytest.raises(ValueError, match="not for"):
        open_record(record, again)


async def test_the_store_forgets_one_users_key_in_the_callers_transaction(pool: PgPool) -> None:
    keys = KeyStore(pool, MASTER)
    await keys.get_or_create("t", "alice")
    bob = await keys.get_or_create("t", "bob")
    async with pool.transaction("forget") as conn:
        assert await keys.forget(conn, "t", "alice")
        assert not await keys.forget(conn, "t", "nobody")
    assert await keys.current([("t", "alice"), ("t", "bob")]) == {("t", "bob"): bob}


async def test_a_process_with_another_master_key_refuses_instead_of_failing_to_decrypt(pool: PgPool) -> None:
    await KeyStore(pool, MASTER).get_or_create("t", "alice")
    wrong = KeyStore(pool, MasterKey(b"\x01" * 32))
    with pytest.raises(MasterKeyMismatch, match="MEMSTREAM_MASTER_KEY"):
        await wrong.current([("t", "alice")])
    with pytest.raises(MasterKeyMismatch):
        await wrong.get_or_create("t", "alice")


async def test_a_wrapped_key_copied_to_another_user_does_not_unwrap(pool: PgPool) -> None:
    keys = KeyStore(pool, MASTER)
    await keys.get_or_create("t", "alice")
    async with pool.connection("copy") as conn:
        await conn.execute(
            """INSERT INTO user_keys (tenant_id, user_id, key_id, wrapped_key, master_key_id)
               SELECT tenant_id, 'mallory', key_id || '-copy', wrapped_key, master_key_id FROM user_keys
               WHERE tenant_id = 't' AND user_id = 'alice'"""
        )
    with pytest.raises(StoreRejected, match="does not open"):
        await keys.current([("t", "mallory")])


async def test_the_cache_holds_at_most_its_size_and_still_answers_for_everyone(pool: PgPool) -> None:
    keys = KeyStore(pool, MASTER, cache_size=2)
    made = {user: await keys.get_or_create("t", user) for user in ("a", "b", "c", "d")}
    assert await keys.current([("t", u) for u in made]) == {("t", u): k for u, k in made.items()}
    assert len(keys._cache) == 2
