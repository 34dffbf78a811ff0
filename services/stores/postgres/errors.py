"""Which Postgres failures are outages and which are the data's fault.

The split follows SQLSTATE classes: a connection problem, an operator
intervention ("the database system is starting up", admin shutdown), lack of
resources or a serialization conflict may pass, so the caller retries; a data
exception, a constraint violation or a statement Postgres cannot accept will
fail the same way every time, so the item goes to the DLQ.
"""

from __future__ import annotations

import psycopg

from services.core.errors import StoreError, StoreRejected, StoreUnavailable

# 08 connection, 40 rollback (deadlock, serialization), 53 resources,
# 57 operator intervention, 58 system error, XX internal.
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58", "XX"})


def classify(exc: BaseException, operation: str) -> StoreError | None:
    """The StoreError `exc` amounts to, or None when it is not a database error at all."""
    if isinstance(exc, StoreError):
        return exc
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate or ""
    # No SQLSTATE: the client side gave up (connection lost, timeout, pool exhausted).
    transient = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not state
    if transient or state[:2] in _TRANSIENT_CLASSES:
        return StoreUnavailable(f"postgres {operation}: unavailable ({type(exc).__name__})")
    detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return StoreRejected(f"postgres {operation}: rejected [{state or 'client'}] {detail}")
