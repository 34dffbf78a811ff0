"""Which role a route needs and whether a principal may make a request. Pure.

The rule is by method and route path, so a route added later is covered
the day it is added, without naming it here:

| route | role |
|---|---|
| `GET` (recall, list, history, working window, export, ...), `POST /v1/recall` | read |
| every other `POST`, `PATCH`, `PUT`, `DELETE` (ingest, add, correct, delete memories) | write |
| `DELETE /v1/users/{user}` (forget the user), `POST .../import`, anything under `/v1/keys` | admin |

A tenant key binds its tenant: every tenant a request names (query string,
JSON body, each item of a batch) must be the key's own, or the request is
refused. Nothing is ever rewritten to the key's tenant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from services.auth.keys import Principal, Role

TENANT_FIELD = "tenant_id"
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_READ_POSTS = frozenset({"/v1/recall"})
# `DELETE /v1/users/{user}`: forgetting a user, whatever the path parameter is called.
_FORGET_USER = re.compile(r"^/v1/users/\{[^/}]+\}/?$")


class Denial(StrEnum):
    TENANT = "tenant"
    ROLE = "role"


def required_role(method: str, path: str) -> Role:
    """`path` is the route's template (`/v1/users/{user_id}`), or the request path when no route matched."""
    method = method.upper()
    if path == "/v1/keys" or path.startswith("/v1/keys/"):
        return Role.ADMIN
    if method in _READ_METHODS or (method == "POST" and path in _READ_POSTS):
        return Role.READ
    if (method == "DELETE" and _FORGET_USER.match(path)) or (method == "POST" and path.rstrip("/").endswith("/import")):
        return Role.ADMIN
    return Role.WRITE


def _tenant_of(item: Any) -> list[str]:
    if isinstance(item, dict):
        value = item.get(TENANT_FIELD)
        if isinstance(value, str):
            return [value]
    return []


def named_tenants(query_values: Iterable[str], body: Any) -> set[str]:
    """Every tenant a request names: query `tenant_id`s, the body's, and those of a batch's items.

    A batch is a JSON array of objects, or an object with array fields of
    objects (`{"turns": [...]}`). Deeper levels are data (a turn's metadata),
    not a request naming a tenant. A `tenant_id` that is not a string is left
    to the route's validation (422).
    """
    found = set(query_values)
    items = body if isinstance(body, list) else [body]
    for item in items:
        found.update(_tenant_of(item))
        if isinstance(item, dict) and item is body:
            for value in item.values():
                if isinstance(value, list):
                    for element in value:
                        found.update(_tenant_of(element))
    return found


def authorize(principal: Principal, required: Role, tenants: Iterable[str]) -> Denial | None:
    """None when allowed; otherwise why not. The tenant is checked first: a stranger learns nothing about roles."""
    if principal.tenant_id is not None and any(t != principal.tenant_id for t in tenants):
        return Denial.TENANT
    if not principal.role.allows(required):
        return Denial.ROLE
    return None
