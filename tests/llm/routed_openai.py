"""The fake OpenAI server with one script per LLM operation, for stages that ask concurrently.

The summarizer sends `summarize_episode` and `extract_facts` side by side,
so which request reaches the server first is up to the scheduler; one shared
script (`fake_openai.FakeOpenAI`) would hand a reply to whichever came
first. Here the request's system prompt picks the script of its operation;
the repair round trip repeats the system prompt, so it stays in its script.
Replies, the wire format and the 500 of an empty script are `fake_openai`'s.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from services.llm.operations import DECIDE_SYSTEM, EPISODE_SYSTEM, EXTRACT_SYSTEM, SYNTHESIZE_SYSTEM
from tests.llm.fake_openai import Reply, _completion, serving

SYSTEMS = {
    EXTRACT_SYSTEM: "extract_facts",
    DECIDE_SYSTEM: "decide",
    EPISODE_SYSTEM: "summarize_episode",
    SYNTHESIZE_SYSTEM: "synthesize",
}


def operation_of(body: dict[str, Any]) -> str:
    """The client sends the operation's system prompt followed by the answer's schema."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    return next((op for prompt, op in SYSTEMS.items() if system.startswith(prompt)), "unknown")


@dataclass
class RoutedOpenAI:
    base_url: str = ""
    scripts: dict[str, deque[Reply]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def queue(self, operation: str, *replies: Reply) -> None:
        with self._lock:
            self.scripts.setdefault(operation, deque()).extend(replies)

    def requests_for(self, operation: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if operation_of(r) == operation]

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            script = self.scripts.get(operation_of(body))
            return script.popleft() if script else Reply(status=500, content="script exhausted")


def _handler(fake: RoutedOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if not self.path.endswith("/chat/completions"):
                return self._send(404, {"error": {"message": "no route"}})
            reply = fake.next_reply(body)
            if reply.status != 200:
                return self._send(reply.status, {"error": {"message": reply.content, "code": reply.status}})
            return self._send(200, _completion(body, reply))

    return Handler


@contextmanager
def routed_openai() -> Iterator[RoutedOpenAI]:
    fake = RoutedOpenAI()
    with serving(_handler(fake)) as fake.base_url:
        yield fake
