import json
from typing import Any

import orjson
import pytest

from schemas import SessionEvent, TurnEvent
from services.core.errors import InvalidEvent
from services.core.ingest import MAX_MESSAGE_CHARS, parse_chat_event, raw_limit

TURN = {
    "event_id": "e1",
    "tenant_id": "acme",
    "user_id": "u1",
    "session_id": "s1",
    "turn_index": 0,
    "role": "user",
    "content": "hello",
    "ts": "2026-11-21T10:00:00Z",
}


def parse(raw: bytes, tenants: frozenset[str] | None = None) -> TurnEvent | SessionEvent:
    return parse_chat_event(raw, max_content_bytes=1024, tenants=tenants)


def reason(raw: bytes, tenants: frozenset[str] | None = None) -> str:
    with pytest.raises(InvalidEvent) as info:
        parse(raw, tenants)
    return info.value.reason


def test_turn_without_type_is_a_turn() -> None:
    assert isinstance(parse(orjson.dumps(TURN)), TurnEvent)


def test_session_end() -> None:
    event = {k: v for k, v in TURN.items() if k in {"event_id", "tenant_id", "user_id", "session_id", "ts"}}
    assert isinstance(parse(orjson.dumps({**event, "type": "session_end"})), SessionEvent)


def test_reasons() -> None:
    assert reason(b"{not json") == "invalid_json"
    assert reason(b"") == "invalid_json"
    assert reason(orjson.dumps({**TURN, "role": "robot"})) == "schema_violation"
    assert reason(orjson.dumps({**TURN, "ts": "2026-11-21T10:00:00"})) == "schema_violation"  # naive time
    assert reason(orjson.dumps({k: v for k, v in TURN.items() if k != "user_id"})) == "schema_violation"
    assert reason(orjson.dumps({**TURN, "content": "x" * 2000})) == "oversized"
    assert reason(b"x" * (raw_limit(1024) + 1)) == "oversized"
    assert reason(orjson.dumps(TURN), frozenset({"other"})) == "unknown_tenant"


def test_ids_may_not_contain_the_key_separator() -> None:
    assert reason(orjson.dumps({**TURN, "tenant_id": "a:b"})) == "schema_violation"


def message(raw: bytes, tenants: frozenset[str] | None = None) -> str:
    with pytest.raises(InvalidEvent) as info:
        parse(raw, tenants)
    return info.value.message


def test_lone_surrogates_and_nan_are_not_json() -> None:
    assert reason(json.dumps({**TURN, "content": "a\ud800"}).encode()) == "invalid_json"
    assert reason(json.dumps({**TURN, "metadata": {"x": float("nan")}}).encode()) == "invalid_json"


def test_largest_valid_event_fits_even_when_fully_escaped() -> None:
    metadata = {f"k{i}": "\u00e9" * 120 for i in range(60)}  # about 15 KiB compact, 43 KiB as \u escapes
    raw = json.dumps({**TURN, "content": "\u00e9" * 512, "metadata": metadata}, ensure_ascii=True).encode()
    event = parse(raw)
    assert isinstance(event, TurnEvent)
    assert len(event.content.encode()) == 1024


def test_content_limit_applies_to_the_normalised_text() -> None:
    decomposed = "e\u0301" * 400  # 1200 bytes as sent, 800 once NFC
    event = parse(orjson.dumps({**TURN, "content": decomposed}))
    assert isinstance(event, TurnEvent)
    assert event.content == "\u00e9" * 400
    assert isinstance(parse(orjson.dumps({**TURN, "content": "x" * 1000 + "\x00" * 100})), TurnEvent)
    assert reason(orjson.dumps({**TURN, "content": "x" * 1025})) == "oversized"


@pytest.mark.parametrize(
    ("changes", "field", "rule"),
    [
        ({"turn_index": 2**31}, "turn_index", "2147483647"),
        ({"turn_index": "5"}, "turn_index", "valid integer"),
        ({"tenant_id": "x\x1fp"}, "tenant_id", "U+001F"),
        ({"user_id": "u" * 201}, "user_id", "1 to 200 characters"),
        ({"session_id": "e\u0301"}, "session_id", "NFC"),
        ({"ts": "2026-11-21T10:00:00"}, "ts", "UTC offset"),
        ({"ts": "9999-12-31T23:00:00-05:00"}, "ts", "1970..2199"),
        ({"metadata": {"k" * 200: 1}}, "metadata", "longer than 128"),
        ({"metadata": {"a": {"\x00" + "k" * 100: 1}}}, "metadata", "NUL"),
        ({"metadata": {"blob": "x" * 10_000, "more": "y" * 10_000}}, "metadata", "limit 16384"),
        ({"type": "nope"}, "type", "'turn'"),
        ({"role": "robot"}, "role", "'user'"),
    ],
)
def test_errors_name_the_field_and_the_rule(changes: dict[str, Any], field: str, rule: str) -> None:
    text = message(orjson.dumps({**TURN, **changes}))
    assert field in text
    assert rule in text


def test_error_messages_are_one_short_printable_line() -> None:
    deep: dict[str, Any] = {}
    for _ in range(300):
        deep = {"k\u00e9" * 40: deep}
    for raw in (
        json.dumps({**TURN, "metadata": deep}).encode(),
        orjson.dumps({**TURN, "metadata": {"\u00e9" * 100 + "\x00": 1}}),
        json.dumps({**TURN, "content": "\udfff"}).encode(),
    ):
        text = message(raw)
        assert len(text) <= MAX_MESSAGE_CHARS
        assert text.isprintable()
        text.encode()  # a DLQ header
    text = message(orjson.dumps({**TURN, "tenant_id": "\u00e9" * 200}), frozenset({"acme"}))
    assert len(text) <= MAX_MESSAGE_CHARS
    assert text.isprintable()
