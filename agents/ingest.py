"""Turning raw bytes from `chat.turns` into events, or into a DLQ reason."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from schemas import SessionEvent, TurnEvent, chat_event_adapter
from services.errors import InvalidEvent

# Every reason parse_chat_event can give, for metrics declared up front.
REASONS = ("invalid_json", "oversized", "schema_violation", "unknown_tenant")
# JSON envelope allowance on top of the content limit.
_ENVELOPE_BYTES = 16 * 1024


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "event"
    return f"{where}: {err['msg']}"


def parse_chat_event(
    raw: bytes | None, *, max_content_bytes: int, tenants: frozenset[str] | None
) -> TurnEvent | SessionEvent:
    """Validate one message; every way it can be bad has its own reason."""
    if raw is None:
        raise InvalidEvent("invalid_json", "empty message value")
    if len(raw) > max_content_bytes + _ENVELOPE_BYTES:
        raise InvalidEvent("oversized", f"message is {len(raw)} bytes, limit {max_content_bytes}")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("invalid_json", str(exc)) from exc
    try:
        event = chat_event_adapter.validate_python(data)
    except ValidationError as exc:
        raise InvalidEvent("schema_violation", _first_error(exc)) from exc
    if isinstance(event, TurnEvent) and len(event.content.encode()) > max_content_bytes:
        raise InvalidEvent("oversized", f"content is {len(event.content.encode())} bytes, limit {max_content_bytes}")
    if tenants is not None and event.tenant_id not in tenants:
        raise InvalidEvent("unknown_tenant", f"tenant {event.tenant_id!r} is not configured")
    return event
