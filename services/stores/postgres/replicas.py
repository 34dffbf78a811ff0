"""Where each read replica has got to in its generation's `memory.changes` (`public.read_replicas`).

Each replica applies the same log in the same order, so a replica whose
position is at or past another's on every partition holds everything the
other holds. `?wait=true` relies on that: once a write shows in the
answering replica's own index, it waits until every live replica has
reported a position at least as far (services/api/replica.py). The rows
also give /readyz and /metrics every replica's lag, whichever one answers.

Like the generations registry, the table is shared by every generation and
created on first use rather than by a numbered (per-schema) migration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from services.stores.postgres.pool import Conn

_TABLE_LOCK = 7_351_017


@dataclass(frozen=True)
class Position:
    name: str
    positions: dict[int, int]  # partition -> next offset to apply
    lag: int
    age_seconds: float  # since the replica last reported


async def ensure_table(conn: Conn) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_TABLE_LOCK,))
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS public.read_replicas (
                   name       text NOT NULL,
                   generation text NOT NULL,
                   positions  jsonb NOT NULL,
                   lag        bigint NOT NULL,
                   updated_at timestamptz NOT NULL DEFAULT now(),
                   PRIMARY KEY (name, generation)
               )"""
        )


async def report(conn: Conn, name: str, generation: str, positions: dict[int, int], lag: int) -> None:
    await conn.execute(
        """INSERT INTO public.read_replicas (name, generation, positions, lag, updated_at)
           VALUES (%s, %s, %s, %s, now())
           ON CONFLICT (name, generation)
           DO UPDATE SET positions = EXCLUDED.positions, lag = EXCLUDED.lag, updated_at = now()""",
        (name, generation, Jsonb({str(p): o for p, o in positions.items()}), lag),
    )


async def forget(conn: Conn, name: str) -> None:
    """A replica that stops cleanly leaves the table: nobody waits for it, and /readyz no longer lists it."""
    await conn.execute("DELETE FROM public.read_replicas WHERE name = %s", (name,))


async def listing(conn: Conn, generation: str) -> list[Position]:
    cur = await conn.execute(
        """SELECT name, positions, lag, extract(epoch FROM now() - updated_at) AS age
           FROM public.read_replicas WHERE generation = %s ORDER BY name""",
        (generation,),
    )
    return [_position(row) for row in await cur.fetchall()]


def _position(row: dict[str, Any]) -> Position:
    positions = {int(p): int(o) for p, o in row["positions"].items()}
    return Position(str(row["name"]), positions, int(row["lag"]), float(row["age"]))


def reached(peer: dict[int, int], target: dict[int, int]) -> bool:
    """Whether a replica at `peer` holds everything one at `target` holds (a partition absent is at 0)."""
    return all(peer.get(partition, 0) >= offset for partition, offset in target.items())
