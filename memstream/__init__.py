"""The Python client of memstream's read service (sync and async).

    from memstream import Client

    with Client("http://localhost:8080", api_key="...") as client:
        found = client.recall("acme", "u-42", "how does the user take coffee?")
        print(found.prompt)

`AsyncClient` has the same methods, awaited. Every failure is a `MemstreamError`:

    MemstreamError
    ├── TransportError        the service could not be reached, or the connection broke
    └── APIError              an error answer: .status, .code, .message, .request_id
        ├── BadRequest        400, 405, 415, 422 (`validation_error`, `rejected`)
        ├── Unauthorized      401
        ├── Forbidden         403
        ├── NotFound          404
        ├── Conflict          409
        ├── PayloadTooLarge   413
        ├── Unavailable       503, 504 (.retry_after)
        └── ServerError       500 and anything else

A 503 with Retry-After and a failed connection are retried up to `retries`
times (Retry-After capped at 10 s) for requests that are safe to repeat; see
memstream._calls for which those are.
"""

from memstream._calls import MemoryFilters, RecallOptions
from memstream.async_client import AsyncClient
from memstream.client import Client
from memstream.errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    MemstreamError,
    NotFound,
    PayloadTooLarge,
    ServerError,
    TransportError,
    Unauthorized,
    Unavailable,
)
from memstream.models import (
    AppliedChange,
    CommandReceipt,
    DeadLetter,
    KeyInfo,
    Memory,
    MemoryDetail,
    MemoryHistory,
    NewKey,
    Readiness,
    RecalledMemory,
    RecallResult,
    Source,
    SourceTurn,
    StageLag,
    TurnsAccepted,
    UserList,
    UserSummary,
    WorkingTurn,
    WorkingWindow,
)

__all__ = [
    "APIError",
    "AppliedChange",
    "AsyncClient",
    "BadRequest",
    "Client",
    "CommandReceipt",
    "Conflict",
    "DeadLetter",
    "Forbidden",
    "KeyInfo",
    "Memory",
    "MemoryDetail",
    "MemoryFilters",
    "MemoryHistory",
    "MemstreamError",
    "NewKey",
    "NotFound",
    "PayloadTooLarge",
    "Readiness",
    "RecallOptions",
    "RecallResult",
    "RecalledMemory",
    "ServerError",
    "Source",
    "SourceTurn",
    "StageLag",
    "TransportError",
    "TurnsAccepted",
    "Unauthorized",
    "Unavailable",
    "UserList",
    "UserSummary",
    "WorkingTurn",
    "WorkingWindow",
]
