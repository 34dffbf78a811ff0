"""API keys against a real Postgres: the table, the cached verifier, last-used times, the operator key of `memstream up`."""

from __future__ import annotations

import asyncio
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from services.auth import KeyStore, KeyVerifier, Principal, Role, load_secret
from services.auth.bootstrap import KeyFileState, api_key_path, ensure_operator_key
from services.auth.keys import key_hash, new_key
from services.core.config import Settings
from services.core.errors import StoreRejected
from services.core.metrics import KEY_LOOKUPS
from services.stores.postgres import PgPool
from tests.pg import PgServer

SECRET = b"store-test-secret-0123456789"
T0 = datetime(2026, 5, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lookups(source: str) -> float:
    value: float = KEY_LOOKUPS.labels(source=source)._value.get()
    return value


async def test_a_key_is_found_by_its_hash_and_never_stored(pool: PgPool, pg_dsn: str) -> None:
    store = KeyStore(pool)
    record, key = await store.create(SECRET, tenant_id="acme", role=Role.WRITE, name="chat backend")
    assert (record.tenant_id, record.role, record.name, record.hint) == ("acme", Role.WRITE, "chat backend", key[:9])
    assert record.active
    assert record.last_used_at is None
    assert record.created_at > datetime.now(UTC) - timedelta(minutes=1)
    assert await store.find(key_hash(SECRET, key)) == record
    assert await store.find(key_hash(b"another-secret-0123456789", key)) is None
    assert await store.find(key_hash(SECRET, new_key())) is None
    # Nothing in the table holds the key or any long piece of it.
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute("SELECT api_keys::text FROM api_keys")
        (row,) = await cur.fetchall()
    assert key[9:] not in row[0]
    assert key[-12:] not in row[0]


async def test_list_and_revoke(pool: PgPool) -> None:
    store = KeyStore(pool)
    a, _ = await store.create(SECRET, tenant_id="a", role=Role.READ)
    operator, _ = await store.create(SECRET, tenant_id=None, role=Role.ADMIN, name="ops")
    b, _ = await store.create(SECRET, tenant_id="b", role=Role.ADMIN)
    assert [k.id for k in await store.list_keys()] == [a.id, operator.id, b.id]
    assert [k.id for k in await store.list_keys("a")] == [a.id]
    assert await store.list_keys("nobody") == []
    revoked = await store.revoke(a.id, at=T0)
    assert revoked is not None
    assert revoked.revoked_at == T0
    assert not revoked.active
    assert await store.revoke(a.id) is None  # already revoked: the first time stays
    assert await store.revoke("no-such-key") is None
    listed = {k.id: k for k in await store.list_keys()}
    assert listed[a.id].revoked_at == T0
    assert listed[b.id].active


async def test_only_an_admin_key_may_be_an_operator_key(pool: PgPool) -> None:
    store = KeyStore(pool)
    with pytest.raises(ValueError, match="operator"):
        await store.create(SECRET, tenant_id=None, role=Role.WRITE)
    # The table says so too, for whatever writes it without this code.
    with pytest.raises(StoreRejected):
        async with pool.connection("test") as conn:
            await conn.execute(
                "INSERT INTO api_keys (id, key_hash, hint, tenant_id, role) VALUES ('x', 'h', 'ms_', NULL, 'read')"
            )


async def test_touch_only_moves_last_used_forward(pool: PgPool) -> None:
    store = KeyStore(pool)
    one, _ = await store.create(SECRET, tenant_id="a", role=Role.READ)
    two, _ = await store.create(SECRET, tenant_id="a", role=Role.READ)
    await store.touch({one.id: T0 + timedelta(minutes=2), two.id: T0})
    await store.touch({one.id: T0})  # an older write arriving late
    await store.touch({})
    used = {k.id: k.last_used_at for k in await store.list_keys()}
    assert used == {one.id: T0 + timedelta(minutes=2), two.id: T0}


async def test_the_verifier_caches_answers_for_its_ttl_then_sees_a_revocation(pool: PgPool) -> None:
    store = KeyStore(pool)
    clock = Clock()
    verifier = KeyVerifier(store, SECRET, ttl=5.0, touch_every=60.0, clock=clock)
    record, key = await store.create(SECRET, tenant_id="acme", role=Role.READ)
    expected = Principal(tenant_id="acme", role=Role.READ, key_id=record.id)

    from_pg = lookups("postgres")
    assert await verifier.verify(key) == expected
    assert await verifier.verify(key) == expected
    assert lookups("postgres") == from_pg + 1  # the second answer came from the cache

    await store.revoke(record.id)
    clock.now += 4.9
    assert await verifier.verify(key) == expected  # within the TTL: still the cached answer
    clock.now += 0.2
    assert await verifier.verify(key) is None  # past it: revoked
    assert lookups("postgres") == from_pg + 2


async def test_unknown_keys_are_cached_too_and_junk_costs_no_lookup(pool: PgPool) -> None:
    clock = Clock()
    verifier = KeyVerifier(KeyStore(pool), SECRET, ttl=5.0, clock=clock)
    unknown = new_key()
    from_pg = lookups("postgres")
    assert await verifier.verify(unknown) is None
    assert await verifier.verify(unknown) is None
    for junk in ("", "password", "ms_" + "x" * 500, "ms_ключ"):
        assert await verifier.verify(junk) is None
    assert lookups("postgres") == from_pg + 1


async def test_the_cache_is_bounded(pool: PgPool) -> None:
    store = KeyStore(pool)
    verifier = KeyVerifier(store, SECRET, ttl=60.0, max_entries=3, clock=Clock())
    _, key = await store.create(SECRET, tenant_id="acme", role=Role.READ)
    for _ in range(10):
        assert await verifier.verify(new_key()) is None
    assert len(verifier._cache) <= 3
    assert await verifier.verify(key) is not None


async def test_last_used_is_written_in_the_background_at_most_once_per_interval(pool: PgPool) -> None:
    store = KeyStore(pool)
    clock = Clock()
    verifier = KeyVerifier(store, SECRET, ttl=5.0, touch_every=60.0, clock=clock)
    record, key = await store.create(SECRET, tenant_id="acme", role=Role.READ)

    async def last_used() -> datetime | None:
        (found,) = [k for k in await store.list_keys("acme") if k.id == record.id]
        return found.last_used_at

    before = datetime.now(UTC)
    await verifier.verify(key)
    await verifier.flush()
    first = await last_used()
    assert first is not None
    assert first >= before - timedelta(seconds=1)

    clock.now += 30
    await asyncio.sleep(0.01)
    await verifier.verify(key)
    await verifier.flush()
    assert await last_used() == first  # within the interval: no write

    clock.now += 31
    await verifier.verify(key)
    await verifier.flush()
    later = await last_used()
    assert later is not None
    assert later > first


def _settings(tmp_path: Path, pg_dsn: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", pg_dsn=pg_dsn)


async def _find(settings: Settings, key: str) -> tuple[Role, str | None, bool] | None:
    pool = PgPool(settings.pg_dsn, 1)
    await pool.open()
    try:
        found = await KeyStore(pool).find(key_hash(load_secret(settings), key))
    finally:
        await pool.close()
    return None if found is None else (found.role, found.tenant_id, found.active)


async def test_memstream_up_creates_one_operator_key_the_first_time(tmp_path: Path, pg_server: PgServer) -> None:
    settings = _settings(tmp_path, pg_server.database())
    made = await ensure_operator_key(settings)
    assert made.state is KeyFileState.CREATED
    assert made.path == api_key_path(settings) == settings.data_dir / "api-key"
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o600
    key = made.path.read_text().strip()
    assert await _find(settings, key) == (Role.ADMIN, None, True)

    again = await ensure_operator_key(settings)
    assert again.state is KeyFileState.KEPT
    assert made.path.read_text().strip() == key

    # Revoked by an operator: it stays revoked, no new key appears behind their back.
    pool = PgPool(settings.pg_dsn, 1)
    await pool.open()
    try:
        (record,) = await KeyStore(pool).list_keys()
        await KeyStore(pool).revoke(record.id)
    finally:
        await pool.close()
    assert (await ensure_operator_key(settings)).state is KeyFileState.REVOKED
    assert made.path.read_text().strip() == key

    # A new database does not know the file's key: a new one replaces it.
    moved = Settings(data_dir=settings.data_dir, pg_dsn=pg_server.database())
    replaced = await ensure_operator_key(moved)
    assert replaced.state is KeyFileState.CREATED
    fresh = replaced.path.read_text().strip()
    assert fresh != key
    assert await _find(moved, fresh) == (Role.ADMIN, None, True)
