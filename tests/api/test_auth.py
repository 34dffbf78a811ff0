"""Every /v1 route behind API keys, on the live server: 401, 403, tenant binding, roles, revocation, no data leaked.

The routes are read from the running app, so a route added later is
checked here the day it is added, without editing this file.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from schemas import ChangeOp, MemoryChange, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.api.app import create_app
from services.api.auth import (
    INVALID_KEY,
    MISSING_KEY,
    OTHER_TENANT,
    SECURITY_SCHEME,
    authenticate,
    protected,
)
from services.api.health import Readiness
from services.auth import Role, required_role
from services.core.textutil import content_hash, stable_id
from services.stores.index_feed import apply_changes
from tests.api.conftest import LiveApi, bearer

TENANT, OTHER = "auth-a", "auth-b"
SECRET_TEXT = "The launch code for project zebra is 4711."
NOW = datetime.now(UTC)
_PARAM = re.compile(r"\{([^}]+)\}")


def _fill(template: str) -> str:
    """A concrete path for a route template: UUIDs where a memory id goes, plain ids elsewhere."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(uuid.uuid4()) if "memory" in name or name == "id" else f"x-{name}"

    return _PARAM.sub(value, template)


def v1_routes(api: LiveApi) -> list[tuple[str, str]]:
    """(method, template) of every /v1 operation the app serves."""
    found = [
        (method, route.path)
        for route in api.app.routes
        if isinstance(route, APIRoute) and protected(route.path)
        for method in sorted(route.methods or ())
    ]
    assert ("POST", "/v1/recall") in found
    return found


def call(
    api: LiveApi, method: str, template: str, headers: dict[str, str], *, tenant: str | None = None, body: Any = None
) -> httpx.Response:
    params = {"tenant_id": tenant} if tenant is not None else None
    kwargs: dict[str, Any] = {"params": params, "headers": headers}
    if body is not None:
        kwargs["json"] = body
    # A fresh request without the client's default (operator) header unless `headers` carries one.
    return httpx.request(method, api.base_url + _fill(template), timeout=30, **kwargs)


def error(response: httpx.Response) -> tuple[str, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"], body["error"]["message"]


@pytest.fixture(scope="module")
def keys(api: LiveApi) -> dict[str, str]:
    made = {
        "read": api.new_key(TENANT, Role.READ, "reader"),
        "write": api.new_key(TENANT, Role.WRITE, "writer"),
        "admin": api.new_key(TENANT, Role.ADMIN, "tenant admin"),
        "other": api.new_key(OTHER, Role.ADMIN, "other tenant's admin"),
        "revoked": api.new_key(TENANT, Role.ADMIN, "revoked"),
    }
    assert api.run(api.keys.revoke(made["revoked"][0].id)) is not None
    return {name: key for name, (_, key) in made.items()}


async def _seed(api: LiveApi, user: str) -> str:
    rt = api.rt
    (vector,) = (await rt.embedder()).embed([SECRET_TEXT])
    record = MemoryRecord(
        id=stable_id("auth-test", user),
        tenant_id=TENANT,
        user_id=user,
        type=MemoryType.FACT,
        text=SECRET_TEXT,
        content_hash=content_hash(SECRET_TEXT),
        importance=0.9,
        confidence=1.0,
        status=MemoryStatus.ACTIVE,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s1", event_ids=["e-auth"]),
    )
    async with rt.pg.transaction("seed") as conn:
        await rt.memories.upsert(conn, record, vector)
    change = MemoryChange(
        tenant_id=TENANT, user_id=user, op=ChangeOp.ADDED, record=record, vector=vector, cause=[], committed_at=NOW
    )
    await apply_changes(rt, [change])
    return record.id


@pytest.fixture(scope="module")
def seeded(api: LiveApi) -> tuple[str, str]:
    user = f"auth-{uuid.uuid4().hex[:8]}"
    return user, api.run(_seed(api, user))


def test_every_v1_route_has_the_gate(api: LiveApi) -> None:
    for route in api.app.routes:
        if isinstance(route, APIRoute) and protected(route.path):
            calls = [d.call for d in route.dependant.dependencies]
            assert authenticate in calls, f"{route.path} is not behind the API key check"


def test_without_a_key_every_v1_route_answers_401(api: LiveApi, keys: dict[str, str]) -> None:
    unknown = "ms_" + "A" * 43
    cases = {
        "no header": ({}, MISSING_KEY),
        "not bearer": ({"authorization": f"Basic {keys['admin']}"}, MISSING_KEY),
        "empty bearer": ({"authorization": "Bearer"}, MISSING_KEY),
        "unknown key": (bearer(unknown), INVALID_KEY),
        "junk": (bearer("letmein"), INVALID_KEY),
        "revoked key": (bearer(keys["revoked"]), INVALID_KEY),
    }
    wrong: list[tuple[Any, ...]] = []
    for method, template in v1_routes(api):
        for case, (headers, message) in cases.items():
            response = call(api, method, template, headers, tenant=TENANT, body={"tenant_id": TENANT})
            if response.status_code != 401 or error(response) != ("unauthorized", message):
                wrong.append((method, template, case, response.status_code, response.text[:200]))
            elif not response.headers.get("www-authenticate", "").startswith("Bearer"):
                wrong.append((method, template, case, "no WWW-Authenticate: Bearer"))
    assert not wrong


def test_another_tenants_key_gets_403_on_every_route_and_no_data(
    api: LiveApi, keys: dict[str, str], seeded: tuple[str, str]
) -> None:
    user, _ = seeded
    wrong: list[tuple[Any, ...]] = []
    for method, template in v1_routes(api):
        concrete = template.replace("{user_id}", user)
        for where in ("query", "body"):
            tenant, body = (TENANT, None) if where == "query" else (None, {"tenant_id": TENANT, "user_id": user})
            response = call(api, method, concrete, bearer(keys["other"]), tenant=tenant, body=body)
            if response.status_code != 403 or error(response) != ("forbidden", OTHER_TENANT):
                wrong.append((method, template, where, response.status_code, response.text[:200]))
            elif "zebra" in response.text or user in response.text or TENANT in response.text:
                wrong.append((method, template, where, "tenant data in the answer"))
    assert not wrong


def test_a_tenant_key_reads_its_own_tenant_and_only_it(
    api: LiveApi, keys: dict[str, str], seeded: tuple[str, str]
) -> None:
    user, memory_id = seeded
    mine = bearer(keys["read"])
    listed = httpx.get(
        f"{api.base_url}/v1/users/{user}/memories", params={"tenant_id": TENANT}, headers=mine, timeout=30
    )
    assert listed.status_code == 200
    assert [m["text"] for m in listed.json()["memories"]] == [SECRET_TEXT]
    history = httpx.get(
        f"{api.base_url}/v1/users/{user}/memories/{memory_id}/history",
        params={"tenant_id": TENANT},
        headers=mine,
        timeout=30,
    )
    assert history.status_code == 200
    body = {"tenant_id": TENANT, "user_id": user, "query": "what is the launch code?", "record_access": False}
    recalled = httpx.post(f"{api.base_url}/v1/recall", json=body, headers=mine, timeout=30)
    assert recalled.status_code == 200
    assert SECRET_TEXT in recalled.text

    # The other tenant's key, asking about its own tenant for the same user id: nothing of tenant A.
    theirs = bearer(keys["other"])
    body_b = {**body, "tenant_id": OTHER}
    assert "zebra" not in httpx.post(f"{api.base_url}/v1/recall", json=body_b, headers=theirs, timeout=30).text
    listed_b = httpx.get(
        f"{api.base_url}/v1/users/{user}/memories", params={"tenant_id": OTHER}, headers=theirs, timeout=30
    )
    assert listed_b.status_code == 200
    assert listed_b.json()["memories"] == []


def test_too_small_a_role_gets_403_and_enough_of_one_passes(api: LiveApi, keys: dict[str, str]) -> None:
    wrong = []
    for method, template in v1_routes(api):
        needed = required_role(method, template)
        for role in (Role.READ, Role.WRITE, Role.ADMIN):
            response = call(api, method, template, bearer(keys[role.value]), tenant=TENANT)
            if role.allows(needed):
                if response.status_code in (401, 403):
                    wrong.append((method, template, role, response.status_code, response.text[:200]))
            elif response.status_code != 403 or error(response) != (
                "forbidden",
                f"this route needs a {needed} key; this key is {role}",
            ):
                wrong.append((method, template, role, response.status_code, response.text[:200]))
    assert not wrong


def test_the_operator_key_passes_the_gate_on_every_route(api: LiveApi) -> None:
    # The client's default header is the operator key; whatever the route says next, it is not 401/403.
    wrong = []
    for method, template in v1_routes(api):
        for tenant in (TENANT, OTHER):
            response = api.client.request(method, _fill(template), params={"tenant_id": tenant})
            if response.status_code in (401, 403):
                wrong.append((method, template, tenant, response.status_code, response.text[:200]))
    assert not wrong


@pytest.mark.parametrize(
    ("params", "body"),
    [
        ({"tenant_id": OTHER}, {"tenant_id": TENANT, "user_id": "u", "query": "q"}),
        ([("tenant_id", TENANT), ("tenant_id", OTHER)], {"tenant_id": TENANT, "user_id": "u", "query": "q"}),
        (None, [{"tenant_id": TENANT, "user_id": "u"}, {"tenant_id": OTHER, "user_id": "u"}]),
        (None, {"tenant_id": TENANT, "events": [{"tenant_id": TENANT}, {"tenant_id": OTHER}]}),
    ],
    ids=["query-vs-body", "two-query-values", "batch-item", "wrapped-batch-item"],
)
def test_any_mention_of_another_tenant_is_403_never_rewritten(
    api: LiveApi, keys: dict[str, str], params: Any, body: Any
) -> None:
    response = httpx.post(
        f"{api.base_url}/v1/recall", params=params, json=body, headers=bearer(keys["admin"]), timeout=30
    )
    assert response.status_code == 403
    assert error(response) == ("forbidden", OTHER_TENANT)


def test_a_batch_naming_only_the_keys_tenant_reaches_the_route(api: LiveApi, keys: dict[str, str]) -> None:
    body = [{"tenant_id": TENANT, "user_id": "u"}, {"tenant_id": TENANT, "user_id": "v"}]
    response = httpx.post(f"{api.base_url}/v1/recall", json=body, headers=bearer(keys["admin"]), timeout=30)
    assert response.status_code == 422  # the route's validation: recall takes one object


def test_a_revoked_key_is_refused_within_the_cache_ttl(api: LiveApi) -> None:
    record, key = api.new_key(TENANT, Role.READ, "to revoke")
    url = f"{api.base_url}/v1/users/u1/memories"
    assert httpx.get(url, params={"tenant_id": TENANT}, headers=bearer(key), timeout=30).status_code == 200
    assert api.run(api.keys.revoke(record.id)) is not None
    ttl = api.thread.settings.auth_cache_seconds
    started = time.monotonic()
    while httpx.get(url, params={"tenant_id": TENANT}, headers=bearer(key), timeout=30).status_code == 200:
        assert time.monotonic() - started < ttl + 1.0, "revocation not in effect within the cache TTL"
        time.sleep(0.05)
    response = httpx.get(url, params={"tenant_id": TENANT}, headers=bearer(key), timeout=30)
    assert response.status_code == 401
    assert error(response) == ("unauthorized", INVALID_KEY)


def test_last_used_is_recorded(api: LiveApi) -> None:
    record, key = api.new_key(TENANT, Role.READ, "last used")
    assert record.last_used_at is None
    url = f"{api.base_url}/v1/users/u1/memories"
    assert httpx.get(url, params={"tenant_id": TENANT}, headers=bearer(key), timeout=30).status_code == 200
    deadline = time.monotonic() + 10
    while True:
        (found,) = [k for k in api.run(api.keys.list_keys(TENANT)) if k.id == record.id]
        if found.last_used_at is not None:
            break
        assert time.monotonic() < deadline, "last_used_at never written"
        time.sleep(0.1)
    assert found.last_used_at >= record.created_at


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json"])
def test_operational_routes_stay_open(api: LiveApi, path: str) -> None:
    response = httpx.get(api.base_url + path, timeout=30)
    assert response.status_code in (200, 503)  # readyz: the test Kafka never answers
    assert response.status_code != 401


def test_openapi_documents_the_bearer_key_on_v1_only(api: LiveApi) -> None:
    spec = httpx.get(f"{api.base_url}/openapi.json", timeout=30).json()
    assert spec["components"]["securitySchemes"][SECURITY_SCHEME] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"][SECURITY_SCHEME]["description"],
    }
    for path, item in spec["paths"].items():
        for operation in item.values():
            if isinstance(operation, dict) and "responses" in operation:
                assert ("security" in operation) is protected(path), path


def test_with_auth_disabled_every_request_is_an_operators(api: LiveApi, caplog: pytest.LogCaptureFixture) -> None:
    rt = replace(api.rt, settings=api.rt.settings.model_copy(update={"auth": "disabled"}))
    with caplog.at_level(logging.WARNING, logger="services.api.auth"):
        app = create_app(rt, Readiness(rt))
    assert "MEMSTREAM_AUTH=disabled" in caplog.text

    async def ask() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [
                (await client.get("/v1/users/u1/memories", params={"tenant_id": t})).status_code
                for t in (TENANT, OTHER)
            ]

    assert api.run(ask()) == [200, 200]
