"""Schema migrations: numbered SQL files, applied once, under an advisory lock."""

from __future__ import annotations

from importlib import resources

from psycopg import AsyncConnection

_MIGRATION_LOCK = 7_351_001


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("services.stores.postgres") / "migrations"
    found = [(int(f.name.split("_", 1)[0]), f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql")]
    return sorted(found)


async def migrate(dsn: str) -> list[int]:
    """Apply pending migrations; concurrent starts wait for each other instead of racing."""
    applied: list[int] = []
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {r[0] for r in await cur.fetchall()}
            for version, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql.encode())
                    await conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                applied.append(version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
    return applied
