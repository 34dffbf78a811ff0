"""Hostile requests: every one is a 4xx with a short JSON `error`, never a 5xx or an echo."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.api.conftest import LiveApi

UUID = "0e5c2d6e-7f1a-4c3b-9d2e-5a6b7c8d9e0f"
MEM = f"/v1/users/u1/memories/{UUID}/history"
JSON = {"content-type": "application/json"}
OK_BODY = {"tenant_id": "t1", "user_id": "u1", "query": "coffee"}
MIB = 1024 * 1024


def body(**changes: Any) -> bytes:
    return json.dumps({**OK_BODY, **changes}).encode()


def raw(text: str) -> bytes:
    """A body as literal JSON text, for tokens json.dumps would never write."""
    return text.encode()


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


@dataclass
class Case:
    name: str
    path: str
    status: int
    method: str = "GET"
    content: Any = None
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))
    field: str | None = None  # a 422 must name this field


def post(name: str, content: Any, status: int = 422, field: str | None = None, **headers: str) -> Case:
    return Case(name, "/v1/recall", status, "POST", content, {**JSON, **headers}, field)


def get(name: str, path: str, status: int = 422, field: str | None = None) -> Case:
    return Case(name, path, status, field=field)


DEEP_ARRAY = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000
NESTED_ID = "[" * 1000 + "]" * 1000  # within orjson's depth limit: the model must refuse it

CASES = [
    # NUL in every id, body, path and query
    post("nul-tenant-body", body(tenant_id="a\x00b"), field="tenant_id"),
    post("nul-user-body", body(user_id="u\x00"), field="user_id"),
    post("nul-session-body", body(session_id="s\x00"), field="session_id"),
    post("nul-query-text", body(query="coffee\x00"), field="query"),
    get("nul-user-path", "/v1/users/u%00/memories?tenant_id=t1", field="user_id"),
    get("nul-tenant-query", "/v1/users/u1/memories?tenant_id=t%00", field="tenant_id"),
    get("nul-type-query", "/v1/users/u1/memories?tenant_id=t1&type=fact%00", field="type"),
    get("nul-status-query", "/v1/users/u1/memories?tenant_id=t1&status=active%00", field="status"),
    get("nul-limit-query", "/v1/users/u1/memories?tenant_id=t1&limit=1%00", field="limit"),
    get("nul-offset-query", "/v1/users/u1/memories?tenant_id=t1&offset=0%00", field="offset"),
    get("nul-history-user", f"/v1/users/u%00/memories/{UUID}/history?tenant_id=t1", field="user_id"),
    get("nul-history-memory", "/v1/users/u1/memories/%00/history?tenant_id=t1", field="memory_id"),
    get("nul-history-tenant", f"{MEM}?tenant_id=%00", field="tenant_id"),
    get("nul-working-session", "/v1/sessions/s%00/working?tenant_id=t1&user_id=u1", field="session_id"),
    get("nul-working-tenant", "/v1/sessions/s1/working?tenant_id=t%00&user_id=u1", field="tenant_id"),
    get("nul-working-user", "/v1/sessions/s1/working?tenant_id=t1&user_id=%00u", field="user_id"),
    # ids that are not ids
    post("colon-in-tenant", body(tenant_id="a:b"), field="tenant_id"),
    post("space-in-user", body(user_id="u 1"), field="user_id"),
    post("control-char-in-user", body(user_id="u\x1f"), field="user_id"),
    post("unicode-space-in-tenant", body(tenant_id="a\u2003b"), field="tenant_id"),
    post("id-201-chars", body(user_id="u" * 201), field="user_id"),
    post("empty-tenant", body(tenant_id=""), field="tenant_id"),
    get("memory-id-not-uuid", "/v1/users/u1/memories/not-a-uuid/history?tenant_id=t1", field="memory_id"),
    get("memory-id-sql-ish", "/v1/users/u1/memories/1'%20OR%201=1/history?tenant_id=t1", field="memory_id"),
    # JSON that Python's json module would have accepted
    post("lone-high-surrogate-query", raw('{"tenant_id":"t1","user_id":"u1","query":"\\ud800"}')),
    post("lone-low-surrogate-tenant", raw('{"tenant_id":"\\udc00","user_id":"u1","query":"q"}')),
    post("surrogate-as-utf8-bytes", b'{"tenant_id":"t1","user_id":"u1","query":"\xed\xa0\x80"}'),
    post("nan-top-k", raw('{"tenant_id":"t1","user_id":"u1","query":"q","top_k":NaN}')),
    post("infinity-budget", raw('{"tenant_id":"t1","user_id":"u1","query":"q","token_budget":Infinity}')),
    post("minus-infinity", raw('{"tenant_id":"t1","user_id":"u1","query":"q","top_k":-Infinity}')),
    post("float-overflow", raw('{"tenant_id":"t1","user_id":"u1","query":"q","top_k":1e400}')),
    post("deep-array-10000", raw(DEEP_ARRAY)),
    post("deep-object-10000", raw(DEEP_OBJECT)),
    post("nested-list-as-id", raw(f'{{"tenant_id":{NESTED_ID},"user_id":"u1","query":"q"}}'), field="tenant_id"),
    post("byte-order-mark", b"\xef\xbb\xbf" + body()),
    # not JSON, or not an object
    post("invalid-json", raw('{"tenant_id": "t1",')),
    post("json-array", raw('[{"tenant_id":"t1","user_id":"u1","query":"q"}]')),
    post("json-string", raw('"hello"')),
    post("json-null", raw("null")),
    post("empty-body", b""),
    post("binary-garbage", bytes(range(256))),
    # numbers out of range or of the wrong type
    post("top-k-1e30", raw('{"tenant_id":"t1","user_id":"u1","query":"q","top_k":1e30}'), field="top_k"),
    post(
        "top-k-10-pow-30",
        raw('{"tenant_id":"t1","user_id":"u1","query":"q","top_k":1000000000000000000000000000000}'),
        field="top_k",
    ),
    post("top-k-negative", body(top_k=-1), field="top_k"),
    post("top-k-zero", body(top_k=0), field="top_k"),
    post("top-k-string", body(top_k="5"), field="top_k"),
    post("top-k-true", body(top_k=True), field="top_k"),
    post("top-k-fraction", body(top_k=5.5), field="top_k"),
    post("budget-2-pow-63", body(token_budget=2**63), field="token_budget"),
    post("tenant-number", body(tenant_id=5), field="tenant_id"),
    post("types-unknown", body(types=["nope"]), field="0"),
    post("types-not-list", body(types="fact"), field="types"),
    post("query-too-long", body(query="x" * 8_001), field="query"),
    post("unknown-field", body(admin=True), field="admin"),
    post("unknown-huge-field-name", body(**{"k" * 50_000: 1})),
    get("offset-2-pow-63", f"/v1/users/u1/memories?tenant_id=t1&offset={2**63}", field="offset"),
    get("offset-2-pow-64", f"/v1/users/u1/memories?tenant_id=t1&offset={2**64}", field="offset"),
    get("offset-5000-digits", "/v1/users/u1/memories?tenant_id=t1&offset=" + "9" * 5000, field="offset"),
    get("offset-negative", "/v1/users/u1/memories?tenant_id=t1&offset=-1", field="offset"),
    get("limit-2-pow-63", f"/v1/users/u1/memories?tenant_id=t1&limit={2**63}", field="limit"),
    get("limit-zero", "/v1/users/u1/memories?tenant_id=t1&limit=0", field="limit"),
    get("limit-float", "/v1/users/u1/memories?tenant_id=t1&limit=1.5", field="limit"),
    get("type-unknown", "/v1/users/u1/memories?tenant_id=t1&type=bogus", field="type"),
    get("tenant-missing", "/v1/users/u1/memories", field="tenant_id"),
    get("long-query-string", "/v1/users/u1/memories?tenant_id=" + "t" * 12_000, field="tenant_id"),
    # size, media type, method, route
    post("body-2-mib", body(query="x" * (2 * MIB)), status=413),
    post("chunked-2-mib", chunks(2 * MIB), status=413),
    Case("text-plain", "/v1/recall", 415, "POST", body(), {"content-type": "text/plain"}),
    Case(
        "form-urlencoded",
        "/v1/recall",
        415,
        "POST",
        b"tenant_id=t1",
        {"content-type": "application/x-www-form-urlencoded"},
    ),
    Case("no-content-type", "/v1/recall", 415, "POST", body(), {}),
    get("unknown-route", "/v1/nope", status=404),
    get("get-on-recall", "/v1/recall", status=405),
]


def _locs(error: Any) -> list[str]:
    return [str(loc[-1]) for loc in (e.get("loc") or ["?"] for e in error.get("details") or []) if loc]


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_request_gets_a_4xx_json_error(api: LiveApi, case: Case) -> None:
    response = api.client.request(case.method, case.path, content=case.content, headers=case.headers)
    assert response.status_code == case.status, response.text[:500]
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers.get("x-request-id")
    error = response.json()["error"]
    assert set(error) <= {"code", "message", "details"}
    assert error["code"]
    assert error["message"]
    # Never an echo: no input, no ctx, and small whatever came in.
    assert len(response.content) < 4096
    if response.status_code == 422:
        assert error["code"] == "validation_error"
        assert all(set(e) == {"type", "loc", "msg"} for e in error["details"])
    if case.field is not None:
        assert case.field in _locs(error), error


def test_a_query_string_of_60_kib_is_refused(api: LiveApi) -> None:
    """Past h11's 16 KiB header limit uvicorn may answer 400 itself (plain text, before the app runs)
    when the head arrives in pieces; when it arrives whole the app answers 422 with a JSON error."""
    response = api.client.get("/v1/users/u1/memories", params={"tenant_id": "t" * 60_000})
    assert response.status_code in {400, 422}
    if response.status_code == 422:
        assert "tenant_id" in _locs(response.json()["error"])
        assert len(response.content) < 4096


def test_413_says_the_limit(api: LiveApi) -> None:
    response = api.client.post("/v1/recall", content=chunks(2 * MIB), headers=JSON)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert str(api.rt.settings.http_max_body_bytes) in response.json()["error"]["message"]
