"""Every route of the read service as a `Call`: what to send, how to read the answer, whether it may be sent again.

Built once here and sent by both clients (memstream.client, memstream.async_client),
so the sync and async clients cannot drift apart.

Retrying (`retry=True`) is for requests whose repetition leaves the same state:
reads; `POST /v1/turns` (the pipeline applies an event id once); deletes and
forget (deleting twice deletes once: the repeat may answer 404 or 409); import
(the server refuses a second import into a user who holds data, and its ids
are derived from the document's). Add and correct are not retried after the
request went out: the server mints each command's id, so a repeat would be a
second command (a reinforced duplicate, or a second version). Any request is
retried when the connection could not be made at all: nothing was sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

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
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None
    retry: bool = True
    accept: tuple[int, ...] = ()  # error statuses that are an answer, not an exception (readyz's 503)

    def query(self) -> dict[str, Any]:
        return {k: _param(v) for k, v in self.params.items() if v is not None}


def _param(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


def _seg(value: str) -> str:
    """A path segment: an id with "/" or "?" stays one segment, and "." or ".." is not collapsed by httpx."""
    return quote(value, safe="").replace(".", "%2E")


def _model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: cls.model_validate_json(response.content)


def _json(response: httpx.Response) -> Any:
    return response.json()


def _items(cls: type[M], field: str) -> Callable[[httpx.Response], list[M]]:
    """The answer's list under `field`, each item a `cls`."""
    return lambda response: [cls.model_validate(item) for item in response.json()[field]]


def _tenant(tenant_id: str | None) -> dict[str, str]:
    """A command body's tenant; none: the API key's (an operator key must name one)."""
    return {} if tenant_id is None else {"tenant_id": tenant_id}


def _user(user_id: str) -> str:
    return f"/v1/users/{_seg(user_id)}"


def _command(
    method: str, path: str, tenant_id: str | None, wait: bool, body: Any = None, retry: bool = True, **params: Any
) -> Call[CommandReceipt]:
    return Call(method, path, _model(CommandReceipt), {"tenant_id": tenant_id, "wait": wait, **params}, body, retry)


def healthz() -> Call[Any]:
    return Call("GET", "/healthz", _json)


def readyz() -> Call[Readiness]:
    return Call("GET", "/readyz", _model(Readiness), accept=(503,))


class MemoryFilters(TypedDict, total=False):
    """The listing's filters; times are ISO 8601 (`as_of`: what was active memory then)."""

    type: str
    layer: str
    status: str
    since: str
    until: str
    as_of: str
    limit: int
    offset: int


class RecallOptions(TypedDict, total=False):
    """`POST /v1/recall`'s optional fields (the server's defaults apply to those not given)."""

    top_k: int
    token_budget: int
    session_id: str
    types: Sequence[str]
    include_compressed: bool
    record_access: bool
    as_of: str
    format: Literal["memory_block", "sections"]


def recall(tenant_id: str, user_id: str, query: str, options: RecallOptions) -> Call[RecallResult]:
    body: dict[str, Any] = {"tenant_id": tenant_id, "user_id": user_id, "query": query, **options}
    if "types" in options:
        body["types"] = list(options["types"])
    return Call("POST", "/v1/recall", _model(RecallResult), body=body)


def working(tenant_id: str, user_id: str, session_id: str) -> Call[WorkingWindow]:
    params = {"tenant_id": tenant_id, "user_id": user_id}
    return Call("GET", f"/v1/sessions/{_seg(session_id)}/working", _model(WorkingWindow), params)


def list_memories(tenant_id: str, user_id: str, filters: MemoryFilters) -> Call[list[Memory]]:
    params = {"tenant_id": tenant_id, **filters}
    return Call("GET", f"{_user(user_id)}/memories", _items(Memory, "memories"), params)


def get_memory(tenant_id: str, user_id: str, memory_id: str) -> Call[MemoryDetail]:
    path = f"{_user(user_id)}/memories/{_seg(memory_id)}"
    return Call("GET", path, _model(MemoryDetail), {"tenant_id": tenant_id})


def list_users(tenant_id: str | None, limit: int | None, offset: int | None) -> Call[UserList]:
    return Call("GET", "/v1/users", _model(UserList), {"tenant_id": tenant_id, "limit": limit, "offset": offset})


def history(tenant_id: str, user_id: str, memory_id: str) -> Call[MemoryHistory]:
    path = f"{_user(user_id)}/memories/{_seg(memory_id)}/history"
    return Call("GET", path, _model(MemoryHistory), {"tenant_id": tenant_id})


def send_turns(events: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Call[TurnsAccepted]:
    body = dict(events) if isinstance(events, Mapping) else [dict(e) for e in events]
    return Call("POST", "/v1/turns", _model(TurnsAccepted), body=body)


def add_memory(tenant_id: str | None, user_id: str, memory: Mapping[str, Any], wait: bool) -> Call[CommandReceipt]:
    body = {**_tenant(tenant_id), **memory}
    return _command("POST", f"{_user(user_id)}/memories", None, wait, body, retry=False)


def correct_memory(
    tenant_id: str | None, user_id: str, memory_id: str, text: str, value: str | None, wait: bool
) -> Call[CommandReceipt]:
    body = {**_tenant(tenant_id), "text": text, **({"value": value} if value is not None else {})}
    return _command("PATCH", f"{_user(user_id)}/memories/{_seg(memory_id)}", None, wait, body, retry=False)


def delete_memory(tenant_id: str | None, user_id: str, memory_id: str, wait: bool) -> Call[CommandReceipt]:
    return _command("DELETE", f"{_user(user_id)}/memories/{_seg(memory_id)}", tenant_id, wait)


def delete_topic(tenant_id: str | None, user_id: str, topic: str, wait: bool) -> Call[CommandReceipt]:
    return _command("DELETE", f"{_user(user_id)}/memories", tenant_id, wait, topic=topic)


def delete_session(tenant_id: str | None, user_id: str, session_id: str, wait: bool) -> Call[CommandReceipt]:
    return _command("DELETE", f"{_user(user_id)}/sessions/{_seg(session_id)}/memories", tenant_id, wait)


def forget_user(tenant_id: str | None, user_id: str, wait: bool) -> Call[CommandReceipt]:
    return _command("DELETE", _user(user_id), tenant_id, wait)


def export(tenant_id: str | None, user_id: str, vectors: bool) -> Call[dict[str, Any]]:
    return Call("GET", f"{_user(user_id)}/export", _json, {"tenant_id": tenant_id, "vectors": vectors})


def import_document(
    tenant_id: str | None, user_id: str, document: Mapping[str, Any], wait: bool
) -> Call[CommandReceipt]:
    body = {**_tenant(tenant_id), "document": dict(document)}
    return _command("POST", f"{_user(user_id)}/import", None, wait, body)


def list_keys(tenant_id: str | None) -> Call[list[KeyInfo]]:
    return Call("GET", "/v1/keys", _items(KeyInfo, "keys"), {"tenant_id": tenant_id})


def create_key(tenant_id: str | None, role: str, name: str) -> Call[NewKey]:
    """Not retried once sent: a repeat would make a second key."""
    body = {"role": role, "name": name, **({"tenant_id": tenant_id} if tenant_id is not None else {})}
    return Call("POST", "/v1/keys", _model(NewKey), body=body, retry=False)


def revoke_key(key_id: str) -> Call[KeyInfo]:
    return Call("DELETE", f"/v1/keys/{_seg(key_id)}", _model(KeyInfo))


def lag() -> Call[list[StageLag]]:
    return Call("GET", "/v1/ops/lag", _items(StageLag, "stages"))


def dead_letters(limit: int | None) -> Call[list[DeadLetter]]:
    return Call("GET", "/v1/ops/dlq", _items(DeadLetter, "entries"), {"limit": limit})
