"""The client's exceptions: one per answer of the API's error model (services/api/errors.py), plus the network.

Every error body is `{"error": {"code": ..., "message": ...}}`; the status picks
the class, `code` and `message` are kept as sent so a caller can branch on
`code` when a status covers several cases (422: `validation_error` or `rejected`).
"""

from __future__ import annotations

from typing import Any

import httpx


class MemstreamError(Exception):
    """Everything this client raises."""


class TransportError(MemstreamError):
    """The read service could not be reached, or the connection broke (after the retries)."""


class APIError(MemstreamError):
    """The read service answered with an error status."""

    def __init__(self, status: int, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id  # the server logs the details under it


class BadRequest(APIError):
    """400, 405, 415 or 422: the request itself is wrong (a field, the body, the method)."""


class Unauthorized(APIError):
    """401: no API key, or an unknown or revoked one."""


class Forbidden(APIError):
    """403: the key's tenant or role does not allow this request."""


class NotFound(APIError):
    """404: no such route, memory, session or user for this tenant."""


class Conflict(APIError):
    """409: the memory is no longer current, or the user already holds data (import)."""


class PayloadTooLarge(APIError):
    """413: the body is over the server's limit, or an import item cannot fit in a message."""


class Unavailable(APIError):
    """503 (or 504): a store or the broker is down, or the request took too long; retry later."""

    def __init__(
        self, status: int, code: str, message: str, request_id: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(status, code, message, request_id)
        self.retry_after = retry_after


class ServerError(APIError):
    """500 and any other status: a bug on the server; `request_id` finds it in its log."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: BadRequest,
    409: Conflict,
    413: PayloadTooLarge,
    415: BadRequest,
    422: BadRequest,
    503: Unavailable,
    504: Unavailable,
}


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (the API sends a number); None when absent or not a number."""
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return max(0.0, seconds) if seconds is not None else None


def _error_fields(response: httpx.Response) -> tuple[str, str]:
    """`code` and `message` of the error body; a body of another shape (a proxy's page) still gives an error."""
    try:
        body: Any = response.json()
        error = body["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return f"http_{response.status_code}", response.text[:500] or response.reason_phrase


def error_for(response: httpx.Response) -> APIError:
    """The exception for an error answer."""
    code, message = _error_fields(response)
    status = response.status_code
    request_id = response.headers.get("x-request-id")
    cls = _BY_STATUS.get(status, ServerError)
    if cls is Unavailable:
        return Unavailable(status, code, message, request_id, retry_after(response))
    return cls(status, code, message, request_id)
