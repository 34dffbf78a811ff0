"""The gate in front of every `/v1` route: a Bearer API key, its tenant, its role.

`install()` makes `authenticate` a dependency of every route the app gets
afterwards (routers included), so a route added later is covered without
asking. For a `/v1` route it

- answers 401 (`WWW-Authenticate: Bearer`) without a key, or with an unknown or revoked one;
- answers 403 when the key's role is below what the route needs
  (services/auth/policy.py), or when the request names a tenant other than
  the key's: a `tenant_id` in the query string, the path, the JSON body or any
  item of a batch body. Nothing is rewritten to the key's tenant;
- otherwise gives the route the `Principal` (`CurrentPrincipal`); `tenant_scope`
  turns it and an optional `tenant_id` into the tenant to act on.

It runs before the route's parameters are validated, so a caller without a
valid key learns nothing about a route beyond the 401. Errors carry no
tenant data. `/healthz`, `/readyz`, `/metrics` and the OpenAPI document stay open.
With MEMSTREAM_AUTH=disabled every request is an operator's, and the start logs a warning.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.routing import APIRoute

from services.api.jsonbody import is_json
from services.auth import (
    UNAUTHENTICATED_OPERATOR,
    Denial,
    KeyStore,
    KeyVerifier,
    Principal,
    authorize,
    load_secret,
    named_tenants,
    required_role,
)
from services.auth.policy import TENANT_FIELD
from services.core.config import Settings
from services.core.metrics import AUTH_DECISIONS
from services.stores.postgres import PgPool

log = logging.getLogger(__name__)

PROTECTED_PREFIX = "/v1/"
SECURITY_SCHEME = "apiKey"
_CHALLENGE = {"www-authenticate": "Bearer"}
_INVALID_CHALLENGE = {"www-authenticate": 'Bearer error="invalid_token"'}
MISSING_KEY = "missing API key: send `Authorization: Bearer <key>` (memstream keys create)"
INVALID_KEY = "invalid or revoked API key"
OTHER_TENANT = "this API key does not give access to the tenant named in the request"
OPERATOR_NEEDS_TENANT = "tenant_id is required with an operator key"


class AuthGate:
    """The app's key checker, or none at all (MEMSTREAM_AUTH=disabled)."""

    def __init__(self, verifier: KeyVerifier | None) -> None:
        self.verifier = verifier

    async def principal(self, authorization: str | None) -> Principal:
        if self.verifier is None:
            return UNAUTHENTICATED_OPERATOR
        scheme, _, presented = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            AUTH_DECISIONS.labels(outcome="unauthenticated").inc()
            raise HTTPException(401, MISSING_KEY, headers=_CHALLENGE)
        found = await self.verifier.verify(presented.strip())
        if found is None:
            AUTH_DECISIONS.labels(outcome="unauthenticated").inc()
            raise HTTPException(401, INVALID_KEY, headers=_INVALID_CHALLENGE)
        return found


def protected(path: str) -> bool:
    return path == PROTECTED_PREFIX.rstrip("/") or path.startswith(PROTECTED_PREFIX)


def route_path(request: Request) -> str:
    """The matched route's template (`/v1/users/{user_id}`), which the role rule reads."""
    route = request.scope.get("route")
    return route.path if isinstance(route, APIRoute) else request.url.path


async def _json_body(request: Request) -> Any:
    """The body as the route will see it, if it is JSON at all; a body that does not parse is the route's 422."""
    if not is_json(request.headers.get("content-type")) or not await request.body():
        return None
    try:
        return await request.json()
    except ValueError:
        return None


def _path_tenant(request: Request) -> list[str]:
    """A route that names the tenant in its path (`/v1/tenants/{tenant_id}/...`) is bound like the query string."""
    value = request.path_params.get(TENANT_FIELD)
    return [value] if isinstance(value, str) else []


async def authenticate(request: Request) -> Principal | None:
    """The dependency of every route (install); None for the open routes outside `/v1`."""
    path = route_path(request)
    if not protected(path):
        return None
    gate: AuthGate = request.app.state.auth
    if gate.verifier is None:
        return UNAUTHENTICATED_OPERATOR
    principal = await gate.principal(request.headers.get("authorization"))
    needed = required_role(request.method, path)
    named = [*request.query_params.getlist(TENANT_FIELD), *_path_tenant(request)]
    tenants = named_tenants(named, await _json_body(request))
    denial = authorize(principal, needed, tenants)
    if denial is not None:
        AUTH_DECISIONS.labels(outcome="forbidden").inc()
        message = (
            OTHER_TENANT
            if denial is Denial.TENANT
            else f"this route needs a {needed} key; this key is {principal.role}"
        )
        raise HTTPException(403, message)
    AUTH_DECISIONS.labels(outcome="allowed").inc()
    return principal


async def current_principal(principal: Annotated[Principal | None, Depends(authenticate)]) -> Principal:
    """A route's principal; FastAPI computes `authenticate` once per request, so this costs nothing more."""
    if principal is None:  # a route outside /v1 asking who calls: nobody it may trust
        raise HTTPException(401, MISSING_KEY, headers=_CHALLENGE)
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]


def tenant_scope(principal: Principal, requested: str | None) -> str:
    """The tenant a request acts on: the one it names (the gate already held it to the key's), else the key's."""
    if requested is not None:
        return requested
    if principal.tenant_id is not None:
        return principal.tenant_id
    raise HTTPException(422, OPERATOR_NEEDS_TENANT)


def document(spec: dict[str, Any]) -> dict[str, Any]:
    """The Bearer scheme, required by every `/v1` operation and by nothing else."""
    schemes = spec.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes[SECURITY_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from `memstream keys create` (`memstream up` writes an operator key to "
        "`.memstream/api-key`). A tenant key binds its tenant; roles: read < write < admin.",
    }
    for path, item in spec.get("paths", {}).items():
        if protected(path):
            for operation in item.values():
                if isinstance(operation, dict) and "responses" in operation:
                    operation["security"] = [{SECURITY_SCHEME: []}]
    return spec


def verifier_for(settings: Settings, pool: PgPool) -> KeyVerifier:
    return KeyVerifier(
        KeyStore(pool),
        load_secret(settings),
        ttl=settings.auth_cache_seconds,
        touch_every=settings.auth_touch_seconds,
    )


def install(app: FastAPI, settings: Settings, pool: PgPool) -> AuthGate:
    """Before any route: FastAPI copies the router's dependencies into each route as it is added."""
    if any(isinstance(r, APIRoute) and protected(r.path) for r in app.routes):
        raise RuntimeError("services.api.auth.install must run before the /v1 routes are added")
    if settings.auth == "disabled":
        log.warning(
            "MEMSTREAM_AUTH=disabled: every /v1 route is open to anyone who can reach %s; local experiments only",
            settings.http_base_url,
        )
        gate = AuthGate(None)
    else:
        gate = AuthGate(verifier_for(settings, pool))
    app.state.auth = gate
    app.router.dependencies.append(Depends(authenticate))
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return gate
