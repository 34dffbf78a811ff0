"""Store errors and bugs become generic answers; valid requests behave as before."""

from __future__ import annotations

import logging
import unicodedata
from typing import Any

import pytest

from services.api.errors import INTERNAL, REJECTED, RETRY_AFTER_SECONDS, UNAVAILABLE
from services.api.models import RecallRequest
from services.core.errors import StoreError, StoreRejected, StoreUnavailable
from tests.api.conftest import LiveApi

SECRET = 'psycopg.errors.Whatever: connection to server at "10.0.0.7" failed: secret detail'
LIST = "/v1/users/u1/memories"


def _raising(exc: Exception) -> Any:
    async def fail(*_: Any, **__: Any) -> Any:
        raise exc

    return fail


@pytest.mark.parametrize(
    ("exc", "status", "code", "message"),
    [
        (StoreUnavailable(SECRET), 503, "unavailable", UNAVAILABLE),
        (StoreError(SECRET), 503, "unavailable", UNAVAILABLE),
        (StoreRejected(SECRET), 422, "rejected", REJECTED),
        (RuntimeError(SECRET), 500, "internal_error", INTERNAL),
    ],
    ids=["unavailable", "unclassified", "rejected", "bug"],
)
def test_errors_answer_generically_and_log_the_details(
    api: LiveApi,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    exc: Exception,
    status: int,
    code: str,
    message: str,
) -> None:
    monkeypatch.setattr(api.rt.reads, "list_memories", _raising(exc))
    with caplog.at_level(logging.INFO):
        response = api.client.get(LIST, params={"tenant_id": "t1"})
    assert response.status_code == status
    assert response.json() == {"error": {"code": code, "message": message}}
    assert "secret" not in response.text
    assert "psycopg" not in response.text
    assert (response.headers.get("retry-after") == str(RETRY_AFTER_SECONDS)) is (status == 503)
    rid = response.headers["x-request-id"]
    logged = [r for r in caplog.records if rid in r.getMessage()]
    assert logged, "the log must tie the details to the request id"
    assert any("secret" in r.getMessage() or (r.exc_info and "secret" in str(r.exc_info[1])) for r in logged)


def test_a_clients_request_id_is_kept_and_a_bad_one_replaced(api: LiveApi) -> None:
    kept = api.client.get("/healthz", headers={"x-request-id": "trace-42.a_b"})
    assert kept.headers["x-request-id"] == "trace-42.a_b"
    replaced = api.client.get("/healthz", headers={"x-request-id": "x" * 65})
    assert replaced.headers["x-request-id"] != "x" * 65
    assert len(replaced.headers["x-request-id"]) == 32


VALID = {"tenant_id": "t1", "user_id": "u1", "query": "what coffee does the user like? ☕ 😀"}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("POST", "/v1/recall", {"json": VALID}, 200),
        ("POST", "/v1/recall", {"json": {**VALID, "top_k": 100, "token_budget": 64_000, "session_id": "s1"}}, 200),
        ("POST", "/v1/recall", {"json": {**VALID, "types": ["fact", "episode"]}}, 200),
        ("POST", "/v1/recall", {"json": {**VALID, "query": "multi\nline\ttext"}}, 200),
        (
            "POST",
            "/v1/recall",
            {
                "content": b'{"tenant_id":"t1","user_id":"u1","query":"q"}',
                "headers": {"content-type": "application/json; charset=utf-8"},
            },
            200,
        ),
        ("GET", LIST, {"params": {"tenant_id": "t1"}}, 200),
        (
            "GET",
            LIST,
            {"params": {"tenant_id": "t1", "type": "fact", "status": "active", "limit": 1000, "offset": 1_000_000}},
            200,
        ),
        ("GET", "/v1/users/Zoë@example.com/memories", {"params": {"tenant_id": "acme-ü"}}, 200),
        ("GET", f"{LIST}/0e5c2d6e-7f1a-4c3b-9d2e-5a6b7c8d9e0f/history", {"params": {"tenant_id": "t1"}}, 404),
        ("GET", "/v1/sessions/s1/working", {"params": {"tenant_id": "t1", "user_id": "u1"}}, 404),
        ("GET", "/healthz", {}, 200),
    ],
)
def test_valid_requests_answer_as_before(
    api: LiveApi, method: str, path: str, kwargs: dict[str, Any], status: int
) -> None:
    response = api.client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    if path == "/v1/recall":
        assert set(response.json()) == {"memories", "prompt", "tokens_used", "working"}
    elif status == 404:
        assert response.json()["error"]["code"] == "not_found"
        assert "for this tenant and user" in response.json()["error"]["message"]


def test_ids_must_already_be_nfc_and_query_text_is_normalised(api: LiveApi) -> None:
    """Ids follow the event contract (stored ids are NFC, compared byte for byte); free text is normalised."""
    decomposed = unicodedata.normalize("NFD", "josé")
    response = api.client.get(f"/v1/users/{decomposed}/memories", params={"tenant_id": "t1"})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["loc"] == ["path", "user_id"]
    assert api.client.get("/v1/users/josé/memories", params={"tenant_id": "t1"}).status_code == 200

    body = RecallRequest.model_validate({"tenant_id": "t1", "user_id": "u1", "query": decomposed})
    assert body.query == "josé"


def test_requests_without_tenant_or_user_name_the_field(api: LiveApi) -> None:
    """The contract tests/e2e relies on: FastAPI's error list shape, with the field last in `loc`."""
    for body in (
        {"user_id": "u", "query": "q"},
        {"tenant_id": "t", "query": "q"},
        {"tenant_id": "", "user_id": "u", "query": "q"},
    ):
        response = api.client.post("/v1/recall", json=body)
        assert response.status_code == 422
        assert response.json()["error"]["details"][0]["loc"][-1] in {"tenant_id", "user_id"}


def test_requests_are_counted_by_route_and_status(api: LiveApi) -> None:
    assert api.client.post("/v1/recall", json={"tenant_id": "t"}).status_code == 422
    assert api.client.get("/v1/users/u1/memories", params={"tenant_id": "t", "offset": -1}).status_code == 422
    text = api.client.get("/metrics").text
    assert 'memstream_http_requests_total{route="/v1/recall",status="422"}' in text
    assert 'memstream_http_requests_total{route="/v1/users/{user_id}/memories",status="422"}' in text


def test_openapi_still_describes_the_routes(api: LiveApi) -> None:
    spec = api.client.get("/openapi.json").json()
    assert {"/v1/recall", "/v1/users/{user_id}/memories", "/v1/sessions/{session_id}/working"} <= set(spec["paths"])
    params = {p["name"]: p for p in spec["paths"]["/v1/users/{user_id}/memories"]["get"]["parameters"]}
    assert params["offset"]["schema"]["maximum"] == 1_000_000
