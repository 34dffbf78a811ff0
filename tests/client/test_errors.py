"""Each error answer of the API's error model becomes its exception, with the body's code and message."""

from __future__ import annotations

import httpx
import pytest

import memstream
from memstream import Client


def _answer(status: int, body: object = None, headers: dict[str, str] | None = None) -> httpx.MockTransport:
    def handler(_: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status, text="<html>proxy page</html>", headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, memstream.BadRequest),
        (401, memstream.Unauthorized),
        (403, memstream.Forbidden),
        (404, memstream.NotFound),
        (405, memstream.BadRequest),
        (409, memstream.Conflict),
        (413, memstream.PayloadTooLarge),
        (415, memstream.BadRequest),
        (422, memstream.BadRequest),
        (500, memstream.ServerError),
        (503, memstream.Unavailable),
        (418, memstream.ServerError),
    ],
)
def test_status_picks_the_exception(status: int, cls: type[memstream.APIError]) -> None:
    body = {"error": {"code": "some_code", "message": "what went wrong"}}
    with (
        Client("http://api", transport=_answer(status, body, {"x-request-id": "r-1"}), retries=0) as client,
        pytest.raises(cls) as raised,
    ):
        client.history("acme", "u-1", "m-1")
    err = raised.value
    assert isinstance(err, memstream.APIError)
    assert isinstance(err, memstream.MemstreamError)
    assert (err.status, err.code, err.message, err.request_id) == (status, "some_code", "what went wrong", "r-1")


def test_a_body_of_another_shape_still_gives_an_api_error() -> None:
    with (
        Client("http://api", transport=_answer(502), retries=0) as client,
        pytest.raises(memstream.ServerError) as raised,
    ):
        client.healthz()
    assert raised.value.code == "http_502"
    assert "proxy page" in raised.value.message


def test_unavailable_carries_retry_after() -> None:
    body = {"error": {"code": "unavailable", "message": "retry later"}}
    with (
        Client("http://api", transport=_answer(503, body, {"retry-after": "2"}), retries=0) as client,
        pytest.raises(memstream.Unavailable) as raised,
    ):
        client.list_memories("acme", "u-1")
    assert raised.value.retry_after == 2.0


def test_readyz_answers_not_ready_without_raising() -> None:
    body = {"ready": False, "checks": {"kafka": False, "postgres": True}}
    with Client("http://api", transport=_answer(503, body, {"retry-after": "0"})) as client:
        ready = client.readyz()
    assert not ready.ready
    assert ready.checks == {"kafka": False, "postgres": True}


def test_requests_carry_the_key_tenant_and_quoted_ids() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"command_id": "c-1", "kind": "delete", "status": "accepted"})

    with Client("http://api/", api_key="k-1", transport=httpx.MockTransport(handler)) as client:
        receipt = client.delete_memory("acme", "u/1", "m-1", wait=True)
    assert receipt.status == "accepted"
    request = seen[0]
    assert request.method == "DELETE"
    assert request.url.raw_path == b"/v1/users/u%2F1/memories/m-1?tenant_id=acme&wait=true"
    assert request.headers["authorization"] == "Bearer k-1"


@pytest.mark.parametrize(
    ("user", "sent"),
    [("a/../b?c=d", b"/v1/users/a%2F%2E%2E%2Fb%3Fc%3Dd/memories"), ("..", b"/v1/users/%2E%2E/memories")],
)
def test_an_id_stays_one_path_segment(user: str, sent: bytes) -> None:
    """A '/', '?' or '..' in an id must not reach another route; httpx would drop a '.' or '..' segment."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"memories": []})

    with Client("http://api", transport=httpx.MockTransport(handler)) as client:
        client.list_memories("acme", user)
    assert seen[0].url.raw_path.split(b"?")[0] == sent


def test_operations_read_their_lists() -> None:
    answers = {
        "/v1/ops/lag": {"stages": [{"stage": "window", "topic": "chat.turns", "lag": 3}]},
        "/v1/ops/dlq": {
            "entries": [
                {
                    "partition": 0,
                    "offset": 7,
                    "reason": "bad json",
                    "headers": {},
                    "original_base64": None,
                    "preview": "{",
                }
            ]
        },
    }
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answers[request.url.path])

    with Client("http://api", transport=httpx.MockTransport(handler)) as client:
        assert [s.lag for s in client.lag()] == [3]
        assert [d.reason for d in client.dead_letters(limit=5)] == ["bad json"]
    assert seen[1].url.params["limit"] == "5"
