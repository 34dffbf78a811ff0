"""A real HTTP server speaking the OpenAI chat-completions and embeddings wire format, scripted.

Each request to /v1/chat/completions takes the next scripted `Reply`: a JSON
content string (valid, garbage or truncated), an HTTP status (429, 500), or
a delay longer than the client's timeout. Embeddings answer deterministic
vectors of `dimension` unless a status is scripted. Every request body is
recorded, so tests can see what the client sent (the repair prompt included).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    content: str = "{}"
    status: int = 200
    delay: float = 0.0
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)


def answer(value: Any) -> Reply:
    return Reply(content=json.dumps(value))


@dataclass
class FakeOpenAI:
    base_url: str = ""
    dimension: int = 8
    script: deque[Reply] = field(default_factory=deque)
    embed_script: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    embed_requests: list[dict[str, Any]] = field(default_factory=list)

    def queue(self, *replies: Reply) -> None:
        self.script.extend(replies)


def _vector(text: str, dimension: int) -> list[float]:
    return [float((len(text) * (i + 1)) % 7) for i in range(dimension)]


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            # A client that timed out has gone away: that was the point.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if self.path.endswith("/chat/completions"):
                fake.requests.append(body)
                reply = fake.script.popleft() if fake.script else Reply(status=500, content="script exhausted")
                time.sleep(reply.delay)
                if reply.status != 200:
                    error = {"error": {"message": reply.content, "type": "scripted", "code": reply.status}}
                    return self._send(reply.status, error, reply.headers)
                return self._send(200, _completion(body, reply), reply.headers)
            if self.path.endswith("/embeddings"):
                fake.embed_requests.append(body)
                reply = fake.embed_script.popleft() if fake.embed_script else Reply()
                if reply.status != 200:
                    return self._send(reply.status, {"error": {"message": reply.content}}, reply.headers)
                data = [
                    {"object": "embedding", "index": i, "embedding": _vector(text, fake.dimension)}
                    for i, text in enumerate(body["input"])
                ]
                usage = {"prompt_tokens": len(body["input"]), "total_tokens": len(body["input"])}
                return self._send(200, {"object": "list", "data": data, "model": body["model"], "usage": usage}, {})
            return self._send(404, {"error": {"message": "no route"}}, {})

    return Handler


def _completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on a free port for the block; yields its OpenAI-style base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def fake_openai(dimension: int = 8) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(dimension=dimension)
    with serving(_handler(fake)) as fake.base_url:
        yield fake
