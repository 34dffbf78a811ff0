"""The operator key `memstream up` creates the first time, kept in `data_dir/api-key` (0600).

Every later start keeps it. If the file's key is unknown to Postgres (a new
database, a new hashing secret) a new one replaces it; if it was revoked, it
stays revoked: an operator who revoked it meant it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from services.auth.keys import Role, key_hash, new_key
from services.auth.secret import load_secret, read_private, write_private
from services.auth.store import KeyStore
from services.core.config import Settings
from services.stores.postgres import PgPool, migrate

API_KEY_FILE = "api-key"
OPERATOR_KEY_NAME = "operator (memstream up)"


class KeyFileState(StrEnum):
    CREATED = "created"
    KEPT = "kept"
    REVOKED = "revoked"


@dataclass(frozen=True)
class OperatorKey:
    path: Path
    state: KeyFileState


def api_key_path(settings: Settings) -> Path:
    return settings.data_dir / API_KEY_FILE


async def ensure_operator_key(settings: Settings) -> OperatorKey:
    """Migrates first: this runs before the app, which would otherwise create the table."""
    path = api_key_path(settings)
    secret = load_secret(settings)
    await migrate(settings.pg_dsn)
    pool = PgPool(settings.pg_dsn, 1, connect_timeout=settings.pg_connect_timeout)
    await pool.open()
    try:
        store = KeyStore(pool)
        if path.exists():
            found = await store.find(key_hash(secret, read_private(path)))
            if found is not None:
                return OperatorKey(path, KeyFileState.KEPT if found.active else KeyFileState.REVOKED)
        # The file first: a crash before the insert leaves a key Postgres does not know, replaced next start.
        key = new_key()
        write_private(path, key + "\n", replace=True)
        await store.add(secret, key, tenant_id=None, role=Role.ADMIN, name=OPERATOR_KEY_NAME)
        return OperatorKey(path, KeyFileState.CREATED)
    finally:
        await pool.close()


def operator_key_notice(settings: Settings) -> str:
    """What `memstream up` prints about authentication (and makes sure of first)."""
    if settings.auth == "disabled":
        return "memstream: WARNING: MEMSTREAM_AUTH=disabled: every /v1 route is open to anyone who can reach the port"
    found = asyncio.run(ensure_operator_key(settings))
    if found.state is KeyFileState.REVOKED:
        return (
            f"memstream: the operator API key in {found.path} is revoked; "
            "create another with `memstream keys create --role admin`"
        )
    verb = "created an operator API key in" if found.state is KeyFileState.CREATED else "operator API key in"
    return f'memstream: {verb} {found.path} (send it as "Authorization: Bearer $(cat {found.path})")'
