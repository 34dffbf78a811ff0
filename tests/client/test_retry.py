"""Retries: a 503 with Retry-After and a failed connection are sent again, where repeating the request is safe."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

import memstream
from memstream import AsyncClient, Client
from memstream._calls import list_memories
from memstream._retry import MAX_RETRY_AFTER, after_answer

_UNAVAILABLE = {"error": {"code": "unavailable", "message": "retry later"}}
_LIST: dict[str, list[object]] = {"memories": []}
_RECEIPT = {"command_id": "c-1", "kind": "add", "status": "accepted", "memory_id": "m-1"}

Handler = Callable[[httpx.Request], httpx.Response]


def _script(*answers: httpx.Response | Exception) -> tuple[Handler, list[httpx.Request]]:
    """A handler giving these answers in turn (an exception is raised, as a broken network would)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        answer = answers[len(seen)]
        seen.append(request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handler, seen


def _busy(retry_after: str | None = "0") -> httpx.Response:
    return httpx.Response(503, json=_UNAVAILABLE, headers={"retry-after": retry_after} if retry_after else {})


def test_503_with_retry_after_is_retried_then_answers() -> None:
    handler, seen = _script(_busy(), _busy(), httpx.Response(200, json=_LIST))
    with Client("http://api", transport=httpx.MockTransport(handler), retries=3) as client:
        assert client.list_memories("acme", "u-1") == []
    assert len(seen) == 3


def test_retries_run_out_into_unavailable() -> None:
    handler, seen = _script(_busy(), _busy())
    with (
        Client("http://api", transport=httpx.MockTransport(handler), retries=1) as client,
        pytest.raises(memstream.Unavailable),
    ):
        client.list_memories("acme", "u-1")
    assert len(seen) == 2


def test_503_without_retry_after_is_not_retried() -> None:
    handler, seen = _script(_busy(None))
    with Client("http://api", transport=httpx.MockTransport(handler)) as client, pytest.raises(memstream.Unavailable):
        client.list_memories("acme", "u-1")
    assert len(seen) == 1


def test_other_errors_are_not_retried() -> None:
    handler, seen = _script(httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}}))
    with Client("http://api", transport=httpx.MockTransport(handler)) as client, pytest.raises(memstream.NotFound):
        client.history("acme", "u-1", "m-1")
    assert len(seen) == 1


def test_add_is_not_sent_twice_after_a_503() -> None:
    """The server mints the command id: a repeated add would be a second command."""
    handler, seen = _script(_busy(), httpx.Response(202, json=_RECEIPT))
    with Client("http://api", transport=httpx.MockTransport(handler)) as client, pytest.raises(memstream.Unavailable):
        client.add_memory("acme", "u-1", "Lives in Berlin")
    assert len(seen) == 1


def test_add_is_retried_when_the_connection_was_never_made() -> None:
    handler, seen = _script(httpx.ConnectError("refused"), httpx.Response(202, json=_RECEIPT))
    with Client("http://api", transport=httpx.MockTransport(handler)) as client:
        assert client.add_memory("acme", "u-1", "Lives in Berlin").memory_id == "m-1"
    assert len(seen) == 2


def test_add_is_not_retried_after_a_read_timeout() -> None:
    handler, seen = _script(httpx.ReadTimeout("slow"), httpx.Response(202, json=_RECEIPT))
    with (
        Client("http://api", transport=httpx.MockTransport(handler)) as client,
        pytest.raises(memstream.TransportError),
    ):
        client.add_memory("acme", "u-1", "Lives in Berlin")
    assert len(seen) == 1


def test_turns_are_retried_after_a_broken_connection() -> None:
    """The pipeline applies an event id once, so sending a batch again is safe."""
    handler, seen = _script(httpx.ReadTimeout("slow"), httpx.Response(202, json={"accepted": 1}))
    event = {"event_id": "e-1", "tenant_id": "acme", "user_id": "u-1", "session_id": "s-1", "turn_index": 0}
    with Client("http://api", transport=httpx.MockTransport(handler)) as client:
        assert client.send_turns(event).accepted == 1
    assert len(seen) == 2
    assert seen[0].content == seen[1].content


def test_unreachable_service_is_a_transport_error() -> None:
    handler, seen = _script(*[httpx.ConnectError("refused")] * 3)
    started = time.monotonic()
    with (
        Client("http://api", transport=httpx.MockTransport(handler), retries=2) as client,
        pytest.raises(memstream.TransportError),
    ):
        client.healthz()
    assert len(seen) == 3
    assert time.monotonic() - started < 2


def test_retry_after_is_capped() -> None:
    call = list_memories("acme", "u-1", {})
    assert after_answer(call, _busy("3600"), 0, 3) == MAX_RETRY_AFTER
    assert after_answer(call, _busy("1.5"), 0, 3) == 1.5
    assert after_answer(call, _busy("soon"), 0, 3) is None
    assert after_answer(call, _busy("1"), 3, 3) is None


async def test_async_client_retries_the_same_way() -> None:
    handler, seen = _script(_busy(), httpx.ConnectError("refused"), httpx.Response(200, json=_LIST))
    async with AsyncClient("http://api", transport=httpx.MockTransport(handler), retries=2) as client:
        assert await client.list_memories("acme", "u-1") == []
    assert len(seen) == 3


async def test_async_add_is_not_retried_after_a_503() -> None:
    handler, seen = _script(_busy(), httpx.Response(202, json=_RECEIPT))
    async with AsyncClient("http://api", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(memstream.Unavailable):
            await client.add_memory("acme", "u-1", "Lives in Berlin")
    assert len(seen) == 1
