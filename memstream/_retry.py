"""When to send a request again, and after how long; the same rules for the sync and the async client."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from memstream._calls import Call
from memstream.errors import TransportError, error_for, retry_after

T = TypeVar("T")

# The longest a client sleeps on a server's Retry-After: a caller waiting longer should decide that itself.
MAX_RETRY_AFTER = 10.0
# Backoff after a failed connection: 0.2 s, 0.4 s, 0.8 s, ... at most 2 s.
_BACKOFF = 0.2
_MAX_BACKOFF = 2.0


def _backoff(attempt: int) -> float:
    return min(_MAX_BACKOFF, _BACKOFF * float(2**attempt))


def after_answer(call: Call[Any], response: httpx.Response, attempt: int, retries: int) -> float | None:
    """Seconds to wait before sending again, or None to take this answer: a 503 with Retry-After, for a retryable call."""
    if attempt >= retries or not call.retry or response.status_code != 503 or response.status_code in call.accept:
        return None
    seconds = retry_after(response)
    return None if seconds is None else min(seconds, MAX_RETRY_AFTER)


def after_error(call: Call[Any], exc: httpx.TransportError, attempt: int, retries: int) -> float | None:
    """Seconds to wait before sending again after a network failure, or None to give up.

    A connection that was never made sent nothing, so any call may try again;
    a failure later (a read timeout, a dropped connection) only a retryable one.
    """
    if attempt >= retries:
        return None
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout) or call.retry:
        return _backoff(attempt)
    return None


def result(call: Call[T], response: httpx.Response) -> T:
    """The call's answer, or its exception."""
    if response.is_success or response.status_code in call.accept:
        return call.parse(response)
    raise error_for(response)


def transport_error(exc: httpx.TransportError) -> TransportError:
    return TransportError(f"{type(exc).__name__}: {exc}")
