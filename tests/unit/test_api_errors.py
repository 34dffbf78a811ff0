"""The one error shape and its documentation, without a server: handlers on a bare FastAPI app, the OpenAPI pass,
the documented examples, and the MCP server's reading of the same errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from memstream.errors import error_for
from services.api import errors, models
from services.api.errors import ErrorBody
from services.mcp_server import _bearer, _error_text


class Body(BaseModel):
    n: int


def _app() -> FastAPI:
    app = FastAPI()
    errors.install(app)

    @app.post("/v1/things/{thing_id}", responses=errors.responses(404))
    async def make(thing_id: int, body: Body) -> dict[str, int]:
        if thing_id == 404:
            raise HTTPException(404, "no thing 404 for this tenant and user")
        if thing_id == 409:
            raise HTTPException(409, {"code": "already_there", "message": "thing 409 exists"})
        if thing_id == 418:
            raise HTTPException(418, "teapot")
        return {"n": body.n}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _call(method: str, path: str, **kwargs: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.request(method, path, **kwargs)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/v1/things/404", {"n": 1}, 404, "not_found"),
        ("POST", "/v1/things/409", {"n": 1}, 409, "already_there"),
        ("POST", "/v1/things/418", {"n": 1}, 418, "http_418"),
        ("GET", "/v1/nowhere", None, 404, "not_found"),
        ("GET", "/v1/things/1", None, 405, "method_not_allowed"),
    ],
)
async def test_every_error_has_the_one_shape(method: str, path: str, body: Any, status: int, code: str) -> None:
    response = await _call(method, path, json=body)
    assert response.status_code == status
    error = ErrorBody.model_validate(response.json()).error
    assert error.code == code
    assert error.message
    assert error.details is None
    if status == 405:
        assert response.headers["allow"] == "POST"


async def test_validation_errors_name_every_field_and_summarise_the_first() -> None:
    response = await _call("POST", "/v1/things/x", json={"n": "many", "extra": 1})
    assert response.status_code == 422
    error = ErrorBody.model_validate(response.json()).error
    assert error.code == "validation_error"
    assert error.details is not None
    assert [d.loc for d in error.details] == [["path", "thing_id"], ["body", "n"]]
    assert error.message.startswith("path.thing_id: ")
    assert error.message.endswith("(and 1 more)")
    assert "many" not in response.text  # never an echo of the input


def test_every_v1_operation_documents_the_common_errors_as_error_body() -> None:
    spec = _app().openapi()
    responses = spec["paths"]["/v1/things/{thing_id}"]["post"]["responses"]
    assert set(responses) == {"200", "401", "403", "404", "413", "415", "422", "500", "503"}
    for status, answer in responses.items():
        if status != "200":
            assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
    assert responses["404"]["description"].startswith("No such record")
    assert set(spec["paths"]["/healthz"]["get"]["responses"]) == {"200"}
    schemas = spec["components"]["schemas"]
    assert {"ErrorBody", "ErrorInfo", "FieldError"} <= set(schemas)
    assert "HTTPValidationError" not in schemas
    assert "HTTPValidationError" not in str(spec)


def _examples(model: type[BaseModel]) -> list[Any]:
    extra = model.model_config.get("json_schema_extra")
    return list(extra.get("examples", [])) if isinstance(extra, dict) else []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "model",
    [
        models.RecallRequest,
        models.RecallResponse,
        models.WorkingWindow,
        models.MemoryList,
        models.History,
        models.ReadyStatus,
        models.Health,
        ErrorBody,
    ],
    ids=lambda m: m.__name__,
)
def test_documented_examples_are_valid(model: type[BaseModel]) -> None:
    examples = _examples(model)
    assert examples, f"{model.__name__} has no example"
    for example in examples:
        model.model_validate(example)


def test_the_mcp_server_reads_the_error_shape_and_the_bearer_key() -> None:
    error = httpx.Response(403, json={"error": {"code": "forbidden", "message": "not your tenant"}})
    assert _error_text(error_for(error)) == "not your tenant (HTTP 403, forbidden)"
    proxy = httpx.Response(502, text="<html>bad gateway</html>")
    assert _error_text(error_for(proxy)) == "<html>bad gateway</html> (HTTP 502, http_502)"
    assert _bearer({"authorization": "Bearer ms_abc"}) == "ms_abc"
    assert _bearer({"authorization": "bearer  ms_abc "}) == "ms_abc"
    assert _bearer({"authorization": "Basic xyz"}) is None
    assert _bearer({}) is None


def test_a_request_that_waits_moves_a_user_or_reads_kafka_gets_its_own_deadline() -> None:
    from services.api.limits import request_budget

    def scope(path: str, query: bytes = b"") -> dict[str, object]:
        return {"type": "http", "path": path, "query_string": query}

    assert request_budget(scope("/v1/recall"), 2.0, 5.0, 30.0, 8.0) == 2.0
    assert request_budget(scope("/v1/users/u/memories", b"tenant_id=t&wait=true"), 2.0, 5.0, 30.0, 8.0) == 7.0
    assert request_budget(scope("/v1/users/u/memories", b"wait=false"), 2.0, 5.0, 30.0, 8.0) == 2.0
    assert request_budget(scope("/v1/users/u/export"), 2.0, 5.0, 30.0, 8.0) == 30.0
    assert request_budget(scope("/v1/users/u/import", b"wait=1"), 2.0, 5.0, 30.0, 8.0) == 30.0
    assert request_budget(scope("/v1/ops/dlq", b"limit=20"), 2.0, 5.0, 30.0, 8.0) == 8.0
    assert request_budget(scope("/v1/ops/lag"), 2.0, 5.0, 30.0, 1.0) == 2.0
