"""The generations registry (`public.generations`): which generations exist, their state, and which one serves.

The names and scoping rules of a generation are pure and live in
services/core/generations.py; this is the table that records them, created on
first use (it is the one table every generation shares, so no numbered
migration owns it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from services.core.generations import (
    DEFAULT,
    DERIVED_TABLES,
    REGISTRY_LOCK,
    Generation,
    GenerationError,
    State,
    check_name,
)
from services.stores.postgres.pool import Conn


@dataclass(frozen=True)
class Row:
    name: str
    state: State
    source: str
    created_at: datetime | None
    switched_at: datetime | None
    detail: dict[str, Any]

    @property
    def schema(self) -> str:
        return Generation(self.name).schema


async def ensure_registry(conn: Conn) -> None:
    """The registry table, created once (concurrent first uses wait for each other)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (REGISTRY_LOCK,))
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS public.generations (
                   name        text PRIMARY KEY,
                   state       text NOT NULL CHECK (state IN ('building', 'ready', 'serving', 'retired')),
                   source      text NOT NULL,
                   created_at  timestamptz NOT NULL DEFAULT now(),
                   switched_at timestamptz,
                   detail      jsonb NOT NULL DEFAULT '{}'
               )"""
        )
        await conn.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS generations_one_serving ON public.generations ((true))"
            " WHERE state = 'serving'"
        )


async def _registry_exists(conn: Conn) -> bool:
    cur = await conn.execute("SELECT to_regclass('public.generations') IS NOT NULL AS present")
    row = await cur.fetchone()
    return bool(row and row["present"])


async def serving(conn: Conn) -> str:
    """The serving generation's name: the default when no row serves (or no registry exists yet)."""
    if not await _registry_exists(conn):
        return DEFAULT
    cur = await conn.execute("SELECT name FROM public.generations WHERE state = 'serving'")
    row = await cur.fetchone()
    return str(row["name"]) if row else DEFAULT


async def listing(conn: Conn) -> list[Row]:
    """Every generation, the default first (it has no row: its state follows from the others)."""
    rows: list[Row] = []
    if await _registry_exists(conn):
        cur = await conn.execute(
            "SELECT name, state, source, created_at, switched_at, detail FROM public.generations ORDER BY created_at"
        )
        rows = [
            Row(r["name"], r["state"], r["source"], r["created_at"], r["switched_at"], r["detail"])
            for r in await cur.fetchall()
        ]
    default_state: State = "ready" if any(r.state == "serving" for r in rows) else "serving"
    return [Row(DEFAULT, default_state, "chat.turns", None, None, {}), *rows]


async def get(conn: Conn, name: str) -> Row | None:
    return next((r for r in await listing(conn) if r.name == name), None)


async def begin(conn: Conn, name: str, source: str) -> None:
    """Register a new generation as `building` and create its schema (see `create_schema`).

    A generation that exists already is refused: drop it first, or pick another name.
    """
    check_name(name)
    await ensure_registry(conn)
    async with conn.transaction():
        cur = await conn.execute(
            "INSERT INTO public.generations (name, state, source) VALUES (%s, 'building', %s)"
            " ON CONFLICT (name) DO NOTHING RETURNING name",
            (name, source),
        )
        if await cur.fetchone() is None:
            raise GenerationError(f"generation {name} exists: `memstream generation drop {name}` first")
        await create_schema(conn, Generation(name))


async def create_schema(conn: Conn, gen: Generation) -> None:
    """The generation's schema: each derived table shaped like public's (columns, defaults, indexes), empty.

    Its `schema_migrations` starts as a copy of public's, so a process of the
    generation finds nothing to migrate (running the migrations into it would
    also create the shared tables there, and shadow public's); a later
    migration is applied to it by the first process of the generation after it.
    """
    await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(gen.schema)))
    for table in (*DERIVED_TABLES, "schema_migrations"):
        await conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                sql.Identifier(gen.schema, table), sql.Identifier("public", table)
            )
        )
    # LIKE copies no triggers: the kept centroids (migration 014) need theirs on the new `memories`.
    await conn.execute("SELECT public.memory_centroids_attach(%s)", (gen.schema,))
    await conn.execute(
        sql.SQL("INSERT INTO {} SELECT * FROM public.schema_migrations").format(
            sql.Identifier(gen.schema, "schema_migrations")
        )
    )


async def set_state(conn: Conn, name: str, state: State, detail: dict[str, Any] | None = None) -> None:
    from psycopg.types.json import Jsonb

    await conn.execute(
        "UPDATE public.generations SET state = %s, detail = detail || %s WHERE name = %s",
        (state, Jsonb(detail or {}), name),
    )


async def switch(conn: Conn, name: str) -> str:
    """Make `name` the serving generation in one transaction; the one that served before (now `ready`)."""
    await ensure_registry(conn)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (REGISTRY_LOCK,))
        before = await serving(conn)
        if name != DEFAULT:
            row = await get(conn, name)
            if row is None:
                raise GenerationError(f"no generation {name}")
            if row.state not in ("ready", "serving"):
                raise GenerationError(f"generation {name} is {row.state}: only a ready generation can serve")
        await conn.execute("UPDATE public.generations SET state = 'ready' WHERE state = 'serving'")
        if name != DEFAULT:
            await conn.execute(
                "UPDATE public.generations SET state = 'serving', switched_at = now() WHERE name = %s", (name,)
            )
    return before


async def drop(conn: Conn, name: str) -> None:
    """Delete the generation's schema (every row it derived) and its registry row; never the serving one."""
    check_name(name)
    await ensure_registry(conn)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (REGISTRY_LOCK,))
        if await serving(conn) == name:
            raise GenerationError(f"generation {name} serves: switch to another one first")
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(Generation(name).schema)))
        await conn.execute("DELETE FROM public.generations WHERE name = %s", (name,))
