"""API keys in Postgres (table `api_keys`, migration 006): only hashes, never a key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.auth.keys import Principal, Role, hint, key_hash, new_key, new_key_id
from services.stores.postgres import PgPool

_COLUMNS = "id, tenant_id, role, name, hint, created_at, last_used_at, revoked_at"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key's record: everything but the key."""

    id: str
    tenant_id: str | None
    role: Role
    name: str
    hint: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def principal(self) -> Principal:
        return Principal(tenant_id=self.tenant_id, role=self.role, key_id=self.id)


def _record(row: dict[str, Any]) -> ApiKey:
    return ApiKey(
        id=row["id"],
        tenant_id=row["tenant_id"],
        role=Role(row["role"]),
        name=row["name"],
        hint=row["hint"],
        created_at=row["created_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
    )


class KeyStore:
    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def add(self, secret: bytes, key: str, *, tenant_id: str | None, role: Role, name: str = "") -> ApiKey:
        """Store `key` (hashed). A key without a tenant is an operator key, which only `admin` may be."""
        if tenant_id is None and role is not Role.ADMIN:
            raise ValueError("a key without a tenant is an operator key and must have the admin role")
        async with self._pool.connection("api_keys.add") as conn:
            cur = await conn.execute(
                f"""INSERT INTO api_keys (id, key_hash, hint, tenant_id, role, name)
                    VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
                (new_key_id(), key_hash(secret, key), hint(key), tenant_id, role.value, name),
            )
            row = await cur.fetchone()
        assert row is not None
        return _record(row)

    async def create(self, secret: bytes, *, tenant_id: str | None, role: Role, name: str = "") -> tuple[ApiKey, str]:
        """A new random key: its record, and the key itself, which nothing keeps."""
        key = new_key()
        return await self.add(secret, key, tenant_id=tenant_id, role=role, name=name), key

    async def find(self, digest: bytes) -> ApiKey | None:
        """The key with this hash, revoked or not."""
        async with self._pool.connection("api_keys.find") as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE key_hash = %s", (digest,))
            row = await cur.fetchone()
        return None if row is None else _record(row)

    async def list_keys(self, tenant_id: str | None = None) -> list[ApiKey]:
        """Every key, or one tenant's, oldest first; revoked keys included (their record is history)."""
        async with self._pool.connection("api_keys.list") as conn:
            cur = await conn.execute(
                f"""SELECT {_COLUMNS} FROM api_keys
                    WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s
                    ORDER BY created_at, id""",
                {"tenant": tenant_id},
            )
            rows = await cur.fetchall()
        return [_record(r) for r in rows]

    async def revoke(self, key_id: str, at: datetime | None = None) -> ApiKey | None:
        """Revoke an active key; None when there is no such active key."""
        async with self._pool.connection("api_keys.revoke") as conn:
            cur = await conn.execute(
                f"""UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL
                    RETURNING {_COLUMNS}""",
                (at or datetime.now(UTC), key_id),
            )
            row = await cur.fetchone()
        return None if row is None else _record(row)

    async def touch(self, uses: Mapping[str, datetime]) -> None:
        """Move each key's last_used_at forward to its use (never back: writes may arrive out of order)."""
        if not uses:
            return
        ids, times = list(uses), list(uses.values())
        async with self._pool.connection("api_keys.touch") as conn:
            await conn.execute(
                """UPDATE api_keys k SET last_used_at = u.at
                   FROM unnest(%s::text[], %s::timestamptz[]) AS u(id, at)
                   WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)""",
                (ids, times),
            )
