"""The synchronous client (httpx.Client)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import httpx

from memstream import _calls as calls
from memstream._calls import Call, MemoryFilters, RecallOptions
from memstream._retry import after_answer, after_error, result, transport_error
from memstream.models import (
    CommandReceipt,
    DeadLetter,
    KeyInfo,
    Memory,
    MemoryDetail,
    MemoryHistory,
    NewKey,
    Readiness,
    RecallResult,
    StageLag,
    TurnsAccepted,
    UserList,
    WorkingWindow,
)

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0


def headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """memstream's read service over HTTP. Every method raises a `memstream.MemstreamError` on failure."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retries = retries
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers(api_key), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.query(), json=call.body)
            except httpx.TransportError as exc:
                delay = after_error(call, exc, attempt, self.retries)
                if delay is None:
                    raise transport_error(exc) from exc
            else:
                delay = after_answer(call, response, attempt, self.retries)
                if delay is None:
                    return result(call, response)
            attempt += 1
            time.sleep(delay)

    # Operations
    def healthz(self) -> dict[str, Any]:
        """Liveness: `{"status": "ok"}` when the process answers."""
        return dict(self._send(calls.healthz()))

    def readyz(self) -> Readiness:
        """Readiness of Kafka, Postgres and the index; `ready` False is an answer, not an exception."""
        return self._send(calls.readyz())

    # Reads
    def recall(self, tenant_id: str, user_id: str, query: str, **options: Unpack[RecallOptions]) -> RecallResult:
        """Ranked memories and a prompt block; options: top_k, token_budget, session_id, types, as_of, format, ..."""
        return self._send(calls.recall(tenant_id, user_id, query, options))

    def working(self, tenant_id: str, user_id: str, session_id: str) -> WorkingWindow:
        """A session's working window (its recent turns)."""
        return self._send(calls.working(tenant_id, user_id, session_id))

    def list_memories(self, tenant_id: str, user_id: str, **filters: Unpack[MemoryFilters]) -> list[Memory]:
        """A user's memories, oldest observed first; filters: type, layer, status, since, until, as_of, limit, offset."""
        return self._send(calls.list_memories(tenant_id, user_id, filters))

    def get_memory(self, tenant_id: str, user_id: str, memory_id: str) -> MemoryDetail:
        """One memory with the turns it was derived from."""
        return self._send(calls.get_memory(tenant_id, user_id, memory_id))

    def list_users(
        self, tenant_id: str | None = None, *, limit: int | None = None, offset: int | None = None
    ) -> UserList:
        """A tenant's users with their memory counts (default tenant: the key's)."""
        return self._send(calls.list_users(tenant_id, limit, offset))

    def history(self, tenant_id: str, user_id: str, memory_id: str) -> MemoryHistory:
        """A memory's versions, oldest first."""
        return self._send(calls.history(tenant_id, user_id, memory_id))

    def export(self, tenant_id: str | None, user_id: str, *, vectors: bool = False) -> dict[str, Any]:
        """Everything held on a user as a `memstream.export/v1` document."""
        return self._send(calls.export(tenant_id, user_id, vectors))

    # Writes
    def send_turns(self, events: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> TurnsAccepted:
        """Chat events (one or a batch) onto chat.turns; safe to repeat (event ids are applied once)."""
        return self._send(calls.send_turns(events))

    def add_memory(
        self, tenant_id: str | None, user_id: str, text: str, *, type: str = "fact", wait: bool = False, **fields: Any
    ) -> CommandReceipt:
        """A memory by hand; fields: category, key_name, value, importance, entities, ..."""
        memory = {"type": type, "text": text, **fields}
        return self._send(calls.add_memory(tenant_id, user_id, memory, wait))

    def correct_memory(
        self,
        tenant_id: str | None,
        user_id: str,
        memory_id: str,
        text: str,
        *,
        value: str | None = None,
        wait: bool = False,
    ) -> CommandReceipt:
        return self._send(calls.correct_memory(tenant_id, user_id, memory_id, text, value, wait))

    def delete_memory(
        self, tenant_id: str | None, user_id: str, memory_id: str, *, wait: bool = False
    ) -> CommandReceipt:
        return self._send(calls.delete_memory(tenant_id, user_id, memory_id, wait))

    def delete_memories(self, tenant_id: str | None, user_id: str, topic: str, *, wait: bool = False) -> CommandReceipt:
        """Every active memory about a topic or entity."""
        return self._send(calls.delete_topic(tenant_id, user_id, topic, wait))

    def delete_session(
        self, tenant_id: str | None, user_id: str, session_id: str, *, wait: bool = False
    ) -> CommandReceipt:
        """Every active memory derived from one session."""
        return self._send(calls.delete_session(tenant_id, user_id, session_id, wait))

    def forget_user(self, tenant_id: str | None, user_id: str, *, wait: bool = False) -> CommandReceipt:
        return self._send(calls.forget_user(tenant_id, user_id, wait))

    def import_document(
        self, tenant_id: str | None, user_id: str, document: Mapping[str, Any], *, wait: bool = False
    ) -> CommandReceipt:
        """An export document into a user who holds no data."""
        return self._send(calls.import_document(tenant_id, user_id, document, wait))

    # API keys (an admin key)
    def list_keys(self, tenant_id: str | None = None) -> list[KeyInfo]:
        """The tenant's keys, revoked ones included; an operator key sees every tenant's, or the one named."""
        return self._send(calls.list_keys(tenant_id))

    def create_key(self, role: str, name: str, *, tenant_id: str | None = None) -> NewKey:
        """A new key (role: read, write or admin); `NewKey.key` is shown this once."""
        return self._send(calls.create_key(tenant_id, role, name))

    def revoke_key(self, key_id: str) -> KeyInfo:
        return self._send(calls.revoke_key(key_id))

    # Operations (an admin key)
    def lag(self) -> list[StageLag]:
        """Messages each pipeline stage has not committed yet (`lag` None: the broker did not answer in time)."""
        return self._send(calls.lag())

    def dead_letters(self, *, limit: int | None = None) -> list[DeadLetter]:
        """The newest dead letters (at most `limit` per partition); a tenant's key sees its own only."""
        return self._send(calls.dead_letters(limit))
