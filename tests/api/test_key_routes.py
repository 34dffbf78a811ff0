"""Keys over HTTP: admins only; a tenant admin sees and revokes its own tenant's keys, an operator every key."""

from __future__ import annotations

import time
import uuid

from services.auth import Role
from tests.api.conftest import LiveApi, bearer


def test_a_tenant_admin_manages_its_own_keys_only(api: LiveApi) -> None:
    tenant = f"keys-{uuid.uuid4().hex[:6]}"
    _, admin = api.new_key(tenant, Role.ADMIN, "admin")
    other, _ = api.new_key(f"other-{uuid.uuid4().hex[:6]}", Role.READ, "stranger")
    made = api.client.post("/v1/keys", json={"role": "read", "name": "console"}, headers=bearer(admin))
    assert made.status_code == 201, made.text
    new = made.json()
    assert new["key"].startswith("ms_")
    assert new["record"]["tenant_id"] == tenant
    listed = api.client.get("/v1/keys", headers=bearer(admin)).json()["keys"]
    assert {k["tenant_id"] for k in listed} == {tenant}
    assert new["record"]["id"] in {k["id"] for k in listed}
    assert all("key" not in k for k in listed)
    # Another tenant's key is not there to revoke; another tenant is not there to create in.
    assert api.client.delete(f"/v1/keys/{other.id}", headers=bearer(admin)).status_code == 404
    elsewhere = {"tenant_id": "elsewhere"}
    assert (
        api.client.post("/v1/keys", params=elsewhere, json={"role": "admin"}, headers=bearer(admin)).status_code == 403
    )
    # Below admin: refused.
    assert api.client.get("/v1/keys", headers=bearer(new["key"])).status_code == 403
    revoked = api.client.delete(f"/v1/keys/{new['record']['id']}", headers=bearer(admin))
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert api.client.delete(f"/v1/keys/{new['record']['id']}", headers=bearer(admin)).status_code == 404
    time.sleep(1.2)  # the verifier's cache (auth_cache_seconds=1 here)
    assert api.client.get("/v1/users", headers=bearer(new["key"])).status_code == 401


def test_an_operator_sees_every_key_and_must_name_a_tenant_to_create(api: LiveApi) -> None:
    tenant = f"keys-{uuid.uuid4().hex[:6]}"
    api.new_key(tenant, Role.WRITE, "w")
    every = api.client.get("/v1/keys").json()["keys"]
    assert tenant in {k["tenant_id"] for k in every}
    assert None in {k["tenant_id"] for k in every}
    assert api.client.post("/v1/keys", json={"role": "admin"}).status_code == 422
    made = api.client.post("/v1/keys", params={"tenant_id": tenant}, json={"role": "write"})
    assert made.status_code == 201
    assert made.json()["record"]["tenant_id"] == tenant
