"""The read service's HTTP server: uvicorn, with a deadline on reading each request.

Why: uvicorn closes idle keep-alive connections, but not a request still
being read. A client that sends its head a byte at a time, or its body
slowly (slowloris), holds its connection, buffers and an app task for as
long as it likes; a few hundred of them take every socket the process may
open. Here a request must have arrived whole, head and body, within
`http_read_timeout` of its first byte (of the connection's opening, for
the first request); otherwise it is answered 408, if nothing was answered
yet, and the connection is closed. What the app does once the body is in
is the per-request deadline's business (services/api/limits.Deadline).

The protocol is uvicorn's httptools one (a declared dependency, and what
uvicorn itself picks when it is installed) with a timer around each request.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from services.api.errors import error_response
from services.core.config import Settings

log = logging.getLogger(__name__)

READ_TIMEOUT_CODE = "request_timeout"


def timeout_answer(seconds: float) -> bytes:
    """The whole 408 response, written straight to the socket (the app may not have seen the request at all)."""
    response = error_response(
        408, f"the request did not arrive within {seconds:g} s", code=READ_TIMEOUT_CODE, headers={"connection": "close"}
    )
    head = b"".join(name + b": " + value + b"\r\n" for name, value in response.raw_headers)
    return b"HTTP/1.1 408 Request Timeout\r\n" + head + b"\r\n" + bytes(response.body)


class ReadDeadlineProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose every request must be read within `read_timeout` seconds (module docstring)."""

    read_timeout: float
    timeout_answer: bytes
    _read_timer: asyncio.TimerHandle | None = None
    _in_head = True  # the request being read has no cycle (and no answer) yet

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        """From the connection's opening, or a later request's first byte; a running timer is kept."""
        if self._read_timer is None:
            self._read_timer = self.loop.call_later(self.read_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self._in_head or not self.cycle.response_started:
            self.transport.write(self.timeout_answer)
        log.info("closed a connection from %s: its request was not read within %gs", self.client, self.read_timeout)
        # The app, if it is waiting for the body, gets http.disconnect (connection_lost).
        self.transport.close()


def read_deadline_protocol(seconds: float) -> type[ReadDeadlineProtocol]:
    return type(
        "ReadDeadline", (ReadDeadlineProtocol,), {"read_timeout": seconds, "timeout_answer": timeout_answer(seconds)}
    )


def server_config(app: Any, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """uvicorn's configuration for the read service (runner and the API tests alike)."""
    options: dict[str, Any] = {
        "host": settings.http_host,
        "port": settings.http_port,
        "log_level": "warning",
        "access_log": False,
        "lifespan": "off",
        "http": read_deadline_protocol(settings.http_read_timeout),
        "timeout_keep_alive": settings.http_keep_alive_timeout,
        **overrides,
    }
    return uvicorn.Config(app, **options)


def shared_port(host: str, port: int) -> socket.socket:
    """A listening socket other processes may bind too (SO_REUSEPORT): the kernel spreads connections over them.

    Read replicas (services/api/replica.py) each bind one; a replica that
    dies takes only its own listener (and its connections) with it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock
