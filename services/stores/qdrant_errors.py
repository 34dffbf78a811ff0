"""Which Qdrant failures are outages and which are the data's fault.

A Qdrant server that cannot be reached, times out, or answers 5xx/429 may
recover: the batch is retried. A 4xx (wrong dimension, bad id, bad filter)
will be refused again: that item goes to the DLQ. The in-process Edge
engine has no network: its errors are about the data, except the
filesystem's, which may pass (disk full, a moment of I/O trouble).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from services.core import metrics
from services.core.errors import StoreError, StoreRejected, StoreUnavailable


def classify(exc: Exception, operation: str) -> StoreError:
    if isinstance(exc, StoreError):
        return exc
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        code = exc.status_code or 503
        if code >= 500 or code == 429:
            return StoreUnavailable(f"qdrant {operation}: unavailable (HTTP {code})")
        return StoreRejected(f"qdrant {operation}: rejected (HTTP {code}) {str(exc)[:300]}")
    if isinstance(exc, ResponseHandlingException | httpx.TransportError | OSError | TimeoutError):
        return StoreUnavailable(f"qdrant {operation}: unavailable ({type(exc).__name__})")
    return StoreRejected(f"qdrant {operation}: rejected ({type(exc).__name__}) {str(exc)[:300]}")


@asynccontextmanager
async def qdrant_call(operation: str) -> AsyncIterator[None]:
    """Time a call and turn whatever it raises into StoreUnavailable or StoreRejected."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        metrics.STORE_ERRORS.labels(store="qdrant", operation=operation).inc()
        raise classify(exc, operation) from exc
    metrics.STORE_LATENCY.labels(store="qdrant", operation=operation).observe(time.perf_counter() - started)
