"""Turning raw bytes from `chat.turns` into events, or into a DLQ reason."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from schemas import SessionEvent, TurnEvent, chat_event_adapter
from schemas.validation import METADATA_MAX_BYTES
from services.core.errors import InvalidEvent

# Every reason parse_chat_event can give, for metrics declared up front.
REASONS = ("invalid_json", "oversized", "schema_violation", "unknown_tenant")
# Messages travel in DLQ headers and HTTP 422 bodies: enough to name the field and the rule.
MAX_MESSAGE_CHARS = 300
# Room for ids, ts and the JSON syntax around content and metadata.
_ENVELOPE_BYTES = 16 * 1024
# A producer may write every character as a `\uXXXX` escape (Python's json does
# for non-ASCII): six bytes per byte is the most valid JSON can spend.
_ESCAPE_FACTOR = 6
_TAGS = frozenset({"turn", "session_end"})


def raw_limit(max_content_bytes: int) -> int:
    """Bytes a message may have before it is parsed: the largest valid event, fully escaped."""
    return _ESCAPE_FACTOR * (max_content_bytes + METADATA_MAX_BYTES) + _ENVELOPE_BYTES


def _short(message: str) -> str:
    """One printable line that encodes as UTF-8 (lone surrogates, controls escaped), and bounded."""
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in message)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def describe(exc: Exception) -> str:
    """A short, safe message for a DLQ header or an HTTP answer: field and rule, never the input."""
    return _short(_first_error(exc) if isinstance(exc, ValidationError) else str(exc))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = list(err["loc"])
    if loc and loc[0] in _TAGS:  # the union's branch, not a field
        loc = loc[1:]
    where = ".".join(str(p) for p in loc) or "event"
    return f"{where}: {err['msg']}"


def parse_chat_event(
    raw: bytes | None, *, max_content_bytes: int, tenants: frozenset[str] | None
) -> TurnEvent | SessionEvent:
    """Validate one message; every way it can be bad has its own reason and a short message naming the rule."""
    if raw is None:
        raise InvalidEvent("invalid_json", "empty message value")
    limit = raw_limit(max_content_bytes)
    if len(raw) > limit:
        raise InvalidEvent("oversized", f"message is {len(raw)} bytes, limit {limit} before parsing")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("invalid_json", _short(str(exc))) from exc
    try:
        event = chat_event_adapter.validate_python(data)
    except ValidationError as exc:
        raise InvalidEvent("schema_violation", _short(_first_error(exc))) from exc
    if isinstance(event, TurnEvent):
        size = len(event.content.encode())
        if size > max_content_bytes:
            raise InvalidEvent("oversized", f"content is {size} bytes after normalisation, limit {max_content_bytes}")
    if tenants is not None and event.tenant_id not in tenants:
        raise InvalidEvent("unknown_tenant", _short(f"tenant {event.tenant_id!r} is not configured"))
    return event
