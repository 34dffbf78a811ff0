"""memstream's exception tree.

MemstreamError
├── ConfigError          settings that cannot work together
├── StoreError           Postgres or Qdrant refused or failed
├── StackError           the embedded stack could not start a component
└── InvalidEvent         an input that belongs in memory.dlq
    (reason: invalid_json | schema_violation | oversized | unknown_tenant)
"""

from __future__ import annotations


class MemstreamError(Exception):
    """Base of every error memstream raises on purpose."""


class ConfigError(MemstreamError):
    pass


class StoreError(MemstreamError):
    pass


class StackError(MemstreamError):
    pass


class InvalidEvent(MemstreamError):
    """Carries a low-cardinality `reason` (a metric label) and a human message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
