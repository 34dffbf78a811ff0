import orjson
import pytest

from agents.ingest import parse_chat_event
from schemas import SessionEvent, TurnEvent
from services.errors import InvalidEvent

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
    assert reason(b"x" * 100_000) == "oversized"
    assert reason(orjson.dumps(TURN), frozenset({"other"})) == "unknown_tenant"


def test_ids_may_not_contain_the_key_separator() -> None:
    assert reason(orjson.dumps({**TURN, "tenant_id": "a:b"})) == "schema_violation"
