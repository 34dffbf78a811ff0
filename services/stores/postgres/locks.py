"""One writer per user: the lock every transaction that writes a user's memory takes first.

The consolidator, its commands stage, maintenance (timed or `memstream
maintain`) and a store rebuild all write `memories`. Each takes the
transaction-level advisory lock of every user it will write, before it reads
anything it decides on, so it decides on rows nobody else changes until it
commits: a row maintenance pruned cannot come back from a consolidator that
read it active, and no two writers publish the same version of a record.

A lock, not an optimistic version check: writers of one user are few and
short (one batch, one maintenance pass), the consolidator reads many rows per
candidate (neighbours, merge targets, centroids), and a retry would redo a
whole batch (and an LLM's verdicts, asked before the transaction) for a
conflict that waiting resolves for the price of one statement. Keys are
taken in ascending order, so transactions that cover several users never
deadlock on each other; a lock is released at commit or rollback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from psycopg.pq import TransactionStatus

from services.stores.postgres.pool import Conn


def user_lock_key(tenant_id: str, user_id: str) -> int:
    """A stable signed 64-bit key for (tenant, user): the same in every process and release."""
    digest = hashlib.blake2b(f"{tenant_id}\x00{user_id}".encode(), digest_size=8, person=b"memstream-user").digest()
    return int.from_bytes(digest, "big", signed=True)


async def lock_users(conn: Conn, users: Iterable[tuple[str, str]]) -> None:
    """Hold these users' locks until the caller's transaction ends (waits for any other holder).

    Must run inside a transaction: outside one, Postgres would release the locks at once.
    """
    if conn.info.transaction_status is TransactionStatus.IDLE:
        raise RuntimeError("a user's lock outside a transaction would be released at once")
    keys = sorted({user_lock_key(tenant_id, user_id) for tenant_id, user_id in users})
    if keys:
        # unnest keeps the array's (ascending) order: the locks are taken one by one in it.
        await conn.execute("SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k", (keys,))
