"""What a client that sends slowly, or sends a body without a valid key, gets from the real read service.

Raw sockets against the real server (uvicorn with services/api/server.py's
protocol, the whole app): the key is checked before a byte of the body is
read (401, connection closed), and a request whose head or body has not
all arrived within `http_read_timeout` gets 408 and is closed.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.auth import Role
from services.core.config import Settings
from tests.api.conftest import LiveApi, ServerThread, create_key
from tests.pg import PgServer

READ_TIMEOUT = 1.0
RECALL = json.dumps({"tenant_id": "t1", "user_id": "u1", "query": "where does the user live?"}).encode()
BAD_KEYS = ["", "Authorization: Bearer nonsense\r\n", f"Authorization: Bearer ms_{'A' * 43}\r\n"]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float  # from the last byte sent to the answer


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def answer(sock: socket.socket, since: float) -> Answer:
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = response.read()
    return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, body, time.monotonic() - since)


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def taken_until_closed(sock: socket.socket, limit: int) -> int:
    """Bytes more the socket takes before the server's close stops it (reset or broken pipe); `limit` at most."""
    sent = 0
    try:
        while sent < limit:
            sock.sendall(b" " * (1 << 20))
            sent += 1 << 20
    except (ConnectionResetError, BrokenPipeError):
        pass
    return sent


def error_code(reply: Answer) -> str:
    return str(json.loads(reply.body)["error"]["code"])


def head(path: str, *lines: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: memstream\r\nContent-Type: application/json\r\n" + "".join(lines)).encode()


@pytest.mark.parametrize("authorization", BAD_KEYS, ids=["no-key", "junk-key", "unknown-key"])
def test_a_bad_key_is_refused_before_the_body_is_read(api: LiveApi, authorization: str) -> None:
    """A chunked body (no length to refuse up front) that never ends: the 401 cannot have waited for it."""
    port = int(api.base_url.rsplit(":", 1)[1])
    with connect(port) as sock:
        sock.sendall(head("/v1/recall", "Transfer-Encoding: chunked\r\n", authorization, "\r\n"))
        sock.sendall(b"8000\r\n" + b" " * 0x8000 + b"\r\n")
        reply = answer(sock, time.monotonic())
        assert reply.status == 401
        assert error_code(reply) == "unauthorized"
        assert reply.headers["connection"] == "close"
        assert closed_by_server(sock)
    print(f"401 after {reply.seconds * 1000:.1f} ms, body never finished")


def test_a_huge_body_with_a_bad_key_gets_401_and_is_not_read(api: LiveApi) -> None:
    """1 GiB announced: 401 (not 413, not a wait), and the connection is closed before much of it was sent."""
    port = int(api.base_url.rsplit(":", 1)[1])
    with connect(port) as sock:
        sock.sendall(head("/v1/recall", f"Content-Length: {1 << 30}\r\n", BAD_KEYS[2], "\r\n"))
        sock.sendall(b" " * 65536)
        reply = answer(sock, time.monotonic())
        assert reply.status == 401
        assert reply.seconds < 2
        sent = 65536 + taken_until_closed(sock, 256 << 20)
    assert sent < 64 << 20, f"the server took {sent >> 20} MiB of a refused body"
    print(f"401 after {reply.seconds * 1000:.1f} ms; the connection refused more after {sent >> 10} KiB")


def test_a_valid_key_still_reaches_the_route(api: LiveApi) -> None:
    assert (
        api.client.post("/v1/recall", content=RECALL, headers={"content-type": "application/json"}).status_code == 200
    )
    assert (
        api.client.post(
            "/v1/recall", content=b"{" * (2 << 20), headers={"content-type": "application/json"}
        ).status_code
        == 413
    )


@pytest.fixture(scope="module")
def quick(api_pg: PgServer, silent_kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    """A second real read service whose read deadline is short: (its port, an operator key)."""
    settings = Settings(
        data_dir=Path(tmp_path_factory.mktemp("read-deadline")),
        pg_dsn=api_pg.database(),
        kafka_bootstrap=silent_kafka,
        embed_threads=1,
        http_read_timeout=READ_TIMEOUT,
    )
    thread = ServerThread(settings)
    thread.start()
    try:
        thread.wait_started(120)
        _, key = create_key(thread, None, Role.ADMIN, "read deadline")
        yield thread.port, key
    finally:
        thread.stop()


def assert_timed_out(reply: Answer, sock: socket.socket, waited_from: float) -> None:
    assert reply.status == 408
    assert error_code(reply) == "request_timeout"
    assert reply.headers["connection"] == "close"
    assert closed_by_server(sock)
    assert READ_TIMEOUT - 0.1 <= time.monotonic() - waited_from <= READ_TIMEOUT + 1.5


def test_a_connection_that_sends_nothing_is_closed(quick: tuple[int, str]) -> None:
    with connect(quick[0]) as sock:
        opened = time.monotonic()
        assert_timed_out(answer(sock, opened), sock, opened)


def test_a_head_sent_a_byte_at_a_time_is_cut_off(quick: tuple[int, str]) -> None:
    with connect(quick[0]) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        while not select.select([sock], [], [], 0.2)[0]:  # one header byte every 200 ms, never the blank line
            sock.sendall(b"X")
            assert time.monotonic() - started < 5, "never cut off"
        assert_timed_out(answer(sock, started), sock, started)


def test_a_body_that_stalls_is_cut_off(quick: tuple[int, str]) -> None:
    port, key = quick
    with connect(port) as sock:
        started = time.monotonic()
        sock.sendall(head("/v1/recall", f"Authorization: Bearer {key}\r\n", f"Content-Length: {len(RECALL)}\r\n\r\n"))
        sock.sendall(RECALL[:10])
        assert_timed_out(answer(sock, started), sock, started)


def test_the_deadline_is_per_request_not_per_connection(quick: tuple[int, str]) -> None:
    """Complete requests on one keep-alive connection, spread over more than the deadline, are all answered."""
    port, key = quick
    with connect(port) as sock:
        for _ in range(3):
            sock.sendall(
                head("/v1/recall", f"Authorization: Bearer {key}\r\n", f"Content-Length: {len(RECALL)}\r\n\r\n")
            )
            sock.sendall(RECALL)
            assert answer(sock, time.monotonic()).status == 200
            time.sleep(READ_TIMEOUT * 0.6)


def test_an_idle_keep_alive_connection_outlives_the_clients_own_expiry(quick: tuple[int, str]) -> None:
    """Idle for 6 s (httpx drops its idle connections after 5 s): the server has not closed it, so a client
    reusing a connection never races the server's close and loses its request."""
    port, key = quick
    with connect(port) as sock:
        for pause in (0.0, 6.0):
            time.sleep(pause)
            sock.sendall(
                head("/v1/recall", f"Authorization: Bearer {key}\r\n", f"Content-Length: {len(RECALL)}\r\n\r\n")
            )
            sock.sendall(RECALL)
            assert answer(sock, time.monotonic()).status == 200
