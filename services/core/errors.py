"""memstream's exception tree.

Every failure a stage meets is one of two kinds, and the kind decides what
happens to the input: an outage only delays it, bad data goes to memory.dlq.

MemstreamError
├── ConfigError              settings that cannot work together
├── StackError               the embedded stack could not start a component
├── StoreError               a store call failed (never raised itself; one of:)
│   ├── StoreUnavailable     transient: connection lost or refused, timeout, pool
│   │                        exhausted, database starting or shutting down, Qdrant
│   │                        unreachable → retry the same batch, uncommitted
│   └── StoreRejected        the data itself: the store will refuse it the same way
│                            forever (encoding, range, constraint) → that item to the DLQ
└── InvalidEvent             an input that belongs in memory.dlq
    (reason: invalid_json | schema_violation | oversized | unknown_tenant |
     conflicting_duplicate | processing_error)
"""

from __future__ import annotations


class MemstreamError(Exception):
    """Base of every error memstream raises on purpose."""


class ConfigError(MemstreamError):
    pass


class StackError(MemstreamError):
    pass


class StoreError(MemstreamError):
    """A store call failed; catch a subclass, which says whether to retry."""


class StoreUnavailable(StoreError):
    """Transient: the same call may succeed later, so the input must be kept."""


class StoreRejected(StoreError):
    """Permanent for this input: retrying can only fail again."""


class InvalidEvent(MemstreamError):
    """Carries a low-cardinality `reason` (a metric label) and a human message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
