"""POST /v1/turns over a real server: what it refuses (every bad event, by index) and how it says the broker is away.

The test Kafka accepts connections and never answers, so every valid request
here must end in 503 with Retry-After, on time; acceptance (202) and what
reaches the topic are end-to-end tests (tests/e2e/test_ingest.py).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from services.api.ingest import MAX_EVENTS, validated
from services.auth import Role
from tests.api.conftest import LiveApi, bearer
from tests.stack import session_end, turn

CONTRACT = Path(__file__).resolve().parents[2] / "schemas" / "json"


def _turn(index: int = 0, **changes: Any) -> dict[str, Any]:
    return {**turn("t", f"ingest-{uuid.uuid4().hex[:8]}", "s", index, f"turn {index}"), **changes}


def _details(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    details: list[dict[str, Any]] = error["details"]
    return details


def test_a_batch_with_bad_events_is_refused_whole_and_each_bad_one_is_named_by_index(api: LiveApi) -> None:
    batch = [
        _turn(0),
        _turn(1, content=5),  # not a string
        _turn(2),
        _turn(3, ts="2026-01-01T10:00:00"),  # no offset
        {**_turn(4), "extra": True},  # not in the contract
    ]
    details = _details(api.client.post("/v1/turns", json=batch))
    assert [d["loc"] for d in details] == [["body", 1], ["body", 3], ["body", 4]]
    assert {d["type"] for d in details} == {"schema_violation"}
    assert details[0]["msg"].startswith("content:")
    assert "offset" in details[1]["msg"]
    assert details[2]["msg"].startswith("extra:")


def test_one_bad_event_sent_alone_is_located_at_the_body(api: LiveApi) -> None:
    [detail] = _details(api.client.post("/v1/turns", json=_turn(0, role="robot")))
    assert detail["loc"] == ["body"]
    assert detail["msg"].startswith("role:")


def test_the_pipelines_own_limits_apply_before_anything_is_sent(api: LiveApi) -> None:
    too_long = "x" * (api.thread.settings.max_content_bytes + 1)
    [detail] = _details(api.client.post("/v1/turns", json=[_turn(0), _turn(1, content=too_long)]))
    assert (detail["loc"], detail["type"]) == (["body", 1], "oversized")
    [detail] = _details(api.client.post("/v1/turns", json=[_turn(0, tenant_id="a:b")]))
    assert detail["msg"].startswith("tenant_id:")


def test_batches_hold_one_to_a_thousand_events(api: LiveApi) -> None:
    for size in (0, MAX_EVENTS + 1):
        [detail] = _details(api.client.post("/v1/turns", json=[_turn(i) for i in range(size)]))
        assert (detail["loc"], detail["type"]) == (["body"], "batch_size")
        assert str(MAX_EVENTS) in detail["msg"]
    for body in (None, "a turn", 5):
        _details(api.client.post("/v1/turns", json=body))


def test_the_body_must_be_json(api: LiveApi) -> None:
    response = api.client.post("/v1/turns", content=b"event_id=e1", headers={"content-type": "text/plain"})
    assert response.status_code == 415


def test_an_unreachable_broker_is_a_503_with_retry_after_within_the_deadline(api: LiveApi) -> None:
    settings = api.thread.settings
    for body in ([_turn(0), session_end("t", "u", "s")], _turn(0)):
        started = time.monotonic()
        response = api.client.post("/v1/turns", json=body)
        took = time.monotonic() - started
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"]
        assert response.json()["error"]["code"] == "unavailable"
        assert took < settings.http_request_timeout + 1.0


def test_a_tenant_key_may_send_only_its_own_tenants_events(api: LiveApi) -> None:
    _, key = api.new_key("t", Role.WRITE)
    batch = [_turn(0), _turn(1, tenant_id="someone-else")]
    response = api.client.post("/v1/turns", json=batch, headers=bearer(key))
    assert response.status_code == 403
    assert "someone-else" not in response.text
    _, reader = api.new_key("t", Role.READ)
    assert api.client.post("/v1/turns", json=_turn(0), headers=bearer(reader)).status_code == 403
    assert api.client.post("/v1/turns", json=_turn(0), headers={"authorization": ""}).status_code == 401


def test_the_document_shows_the_kafka_contract_and_examples_the_route_accepts(api: LiveApi) -> None:
    """Clients (and schemathesis) learn the body from the document: it must be the committed contract itself."""
    document = api.client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    body = document["paths"]["/v1/turns"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    turns_body = schemas[body["$ref"].rsplit("/", 1)[-1]]
    *one, many = turns_body["anyOf"]
    assert many["type"] == "array"
    assert (many["minItems"], many["maxItems"]) == (1, MAX_EVENTS)
    assert many["items"]["anyOf"] == one
    documented = [schemas[branch["$ref"].rsplit("/", 1)[-1]] for branch in one]
    for name, schema in zip(("turn_event", "session_event"), documented, strict=True):
        committed = json.loads(
            (CONTRACT / f"{name}.schema.json").read_text().replace('"#/$defs/', '"#/components/schemas/')
        )
        definitions = committed.pop("$defs")
        assert schema == committed
        assert {key: schemas[key] for key in definitions} == definitions
    assert "type" in documented[1]["required"]  # a session_end says so; an event without `type` is a turn
    examples = turns_body["examples"]
    assert any(isinstance(example, list) and len(example) > 1 for example in examples)
    kinds: set[str] = set()
    for example in examples:  # what the route itself checks, before it produces
        events = validated(example, api.thread.settings)
        assert len(events) == (len(example) if isinstance(example, list) else 1)
        kinds.update(event.type for event in events)
    assert kinds == {"turn", "session_end"}
