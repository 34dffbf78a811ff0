"""API keys without I/O beyond temp files: key shape and hashing, roles, the route rule, tenant binding, the secret."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from services.api.auth import SECURITY_SCHEME, document
from services.auth import Denial, Principal, Role, authorize, load_secret, named_tenants, required_role
from services.auth.client import client_headers
from services.auth.keys import KEY_PREFIX, MAX_KEY_CHARS, hint, key_hash, looks_like_key, new_key
from services.auth.secret import SECRET_FILE, write_private
from services.core.config import Settings
from services.core.errors import ConfigError

SECRET = b"s" * 32


def test_keys_are_random_urlsafe_and_recognisable() -> None:
    keys = {new_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith(KEY_PREFIX)
        assert len(key) == len(KEY_PREFIX) + 43  # 32 bytes, base64 without padding
        assert looks_like_key(key)
        assert hint(key) == key[:9]
        assert key.replace("-", "").replace("_", "").isalnum()


@pytest.mark.parametrize("presented", ["", "Bearer", "sk_" + "a" * 43, "ms_" + "a" * MAX_KEY_CHARS, "ms_ключ"])
def test_what_is_not_shaped_like_a_key_is_refused_before_hashing(presented: str) -> None:
    assert not looks_like_key(presented)


def test_the_hash_is_keyed_deterministic_and_never_the_key() -> None:
    key = new_key()
    digest = key_hash(SECRET, key)
    assert digest == key_hash(SECRET, key)
    assert len(digest) == 32
    assert key.encode() not in digest
    assert key_hash(b"another secret!!", key) != digest
    assert key_hash(SECRET, new_key()) != digest


def test_roles_are_ordered() -> None:
    assert [r for r in Role if Role.READ.allows(r)] == [Role.READ]
    assert [r for r in Role if Role.WRITE.allows(r)] == [Role.READ, Role.WRITE]
    assert [r for r in Role if Role.ADMIN.allows(r)] == list(Role)


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("POST", "/v1/recall", Role.READ),
        ("GET", "/v1/users/{user_id}/memories", Role.READ),
        ("GET", "/v1/users/{user_id}/memories/{memory_id}/history", Role.READ),
        ("GET", "/v1/sessions/{session_id}/working", Role.READ),
        ("GET", "/v1/users/{user_id}/export", Role.READ),
        ("POST", "/v1/turns", Role.WRITE),
        ("POST", "/v1/users/{user_id}/memories", Role.WRITE),
        ("PATCH", "/v1/users/{user_id}/memories/{memory_id}", Role.WRITE),
        ("DELETE", "/v1/users/{user_id}/memories/{memory_id}", Role.WRITE),
        ("DELETE", "/v1/users/{user_id}/memories", Role.WRITE),
        ("DELETE", "/v1/users/{user}/sessions/{session}/memories", Role.WRITE),
        ("DELETE", "/v1/users/{user_id}", Role.ADMIN),
        ("delete", "/v1/users/{user}/", Role.ADMIN),
        ("POST", "/v1/users/{user_id}/import", Role.ADMIN),
        ("GET", "/v1/keys", Role.ADMIN),
        ("POST", "/v1/keys/{key_id}/revoke", Role.ADMIN),
        ("PUT", "/v1/something/new", Role.WRITE),
    ],
)
def test_the_role_a_route_needs(method: str, path: str, role: Role) -> None:
    assert required_role(method, path) is role


def test_named_tenants_reads_query_body_and_batch_items_but_not_data() -> None:
    assert named_tenants([], None) == set()
    assert named_tenants(["a", "b"], None) == {"a", "b"}
    assert named_tenants([], {"tenant_id": "a", "user_id": "u"}) == {"a"}
    assert named_tenants(["q"], [{"tenant_id": "a"}, {"tenant_id": "b"}, "junk", 5]) == {"q", "a", "b"}
    assert named_tenants([], {"turns": [{"tenant_id": "a"}, {"tenant_id": "c"}], "tenant_id": "b"}) == {"a", "b", "c"}
    # A turn's metadata is the user's data: a field named tenant_id in it names nothing.
    assert named_tenants([], [{"tenant_id": "a", "metadata": {"tenant_id": "x"}}]) == {"a"}
    assert named_tenants([], {"tenant_id": "a", "metadata": {"tenant_id": "x"}}) == {"a"}
    # Not a string: the route's validation answers (422), not the gate.
    assert named_tenants([], {"tenant_id": 5}) == set()


def test_authorize() -> None:
    operator = Principal(tenant_id=None, role=Role.ADMIN, key_id="k")
    reader = Principal(tenant_id="a", role=Role.READ, key_id="r")
    assert authorize(operator, Role.ADMIN, {"a", "b"}) is None
    assert authorize(reader, Role.READ, {"a"}) is None
    assert authorize(reader, Role.READ, set()) is None
    assert authorize(reader, Role.WRITE, {"a"}) is Denial.ROLE
    # Another tenant is refused as such whatever the role, so a stranger learns nothing about roles.
    assert authorize(reader, Role.ADMIN, {"a", "b"}) is Denial.TENANT


tenant_ids = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs")), min_size=1, max_size=30).filter(
    lambda t: ":" not in t and "/" not in t
)
roles = st.sampled_from(list(Role))


def _request_naming(tenants: list[str], shape: int) -> tuple[list[str], Any]:
    """The same tenants named by a query, a body, a batch or a wrapped batch."""
    if shape == 0:
        return tenants, None
    if shape == 1:
        return tenants[1:], {"tenant_id": tenants[0], "user_id": "u"}
    if shape == 2:
        return [], [{"tenant_id": t, "user_id": "u", "metadata": {"tenant_id": tenants[0]}} for t in tenants]
    return [], {"events": [{"tenant_id": t} for t in tenants]}


@given(
    mine=tenant_ids,
    other=tenant_ids,
    role=roles,
    needed=roles,
    position=st.integers(0, 5),
    shape=st.integers(0, 3),
)
def test_a_key_of_one_tenant_never_authorizes_a_request_naming_another(
    mine: str, other: str, role: Role, needed: Role, position: int, shape: int
) -> None:
    principal = Principal(tenant_id=mine, role=role, key_id="k")
    own = [mine] * 5
    named = [*own[:position], other, *own[position:]]
    query, body = _request_naming(named, shape)
    decision = authorize(principal, needed, named_tenants(query, body))
    if other == mine:
        assert decision in (None, Denial.ROLE)
        assert (decision is None) is role.allows(needed)
    else:
        assert decision is Denial.TENANT


@given(mine=tenant_ids, role=roles, needed=roles, shape=st.integers(0, 3), count=st.integers(1, 4))
def test_a_key_authorizes_its_own_tenant_exactly_when_its_role_suffices(
    mine: str, role: Role, needed: Role, shape: int, count: int
) -> None:
    query, body = _request_naming([mine] * count, shape)
    decision = authorize(Principal(tenant_id=mine, role=role), needed, named_tenants(query, body))
    assert decision is (None if role.allows(needed) else Denial.ROLE)


def _settings(tmp_path: Path, **extra: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", **extra)


def test_the_secret_is_generated_once_into_the_data_dir_readable_by_its_owner_only(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = load_secret(settings)
    path = settings.data_dir / SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) >= 32
    assert load_secret(settings) == first
    assert [p.name for p in settings.data_dir.iterdir()] == [SECRET_FILE]  # no temp file left behind


def test_a_secret_file_others_can_read_is_narrowed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(tmp_path)
    secret = load_secret(settings)
    path = settings.data_dir / SECRET_FILE
    path.chmod(0o644)
    assert load_secret(settings) == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "narrowing" in caplog.text


def test_the_secret_from_the_environment_wins_and_must_be_long_enough(tmp_path: Path) -> None:
    assert load_secret(_settings(tmp_path, auth_secret=SecretStr("x" * 40))) == b"x" * 40
    assert not (tmp_path / "data").exists()
    with pytest.raises(ConfigError):
        load_secret(_settings(tmp_path, auth_secret=SecretStr("short")))


def test_write_private_without_replace_keeps_the_first_content(tmp_path: Path) -> None:
    path = tmp_path / "f"
    assert write_private(path, "one", replace=False)
    assert not write_private(path, "two", replace=False)
    assert path.read_text() == "one"
    assert write_private(path, "three", replace=True)
    assert path.read_text() == "three"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_client_headers_prefer_the_environment_then_the_data_dir(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert client_headers(settings) == {}
    write_private(settings.data_dir / "api-key", "ms_fromfile\n", replace=True)
    assert client_headers(settings) == {"authorization": "Bearer ms_fromfile"}
    assert client_headers(_settings(tmp_path, api_key=SecretStr("ms_fromenv"))) == {
        "authorization": "Bearer ms_fromenv"
    }


def test_openapi_requires_the_bearer_scheme_on_v1_operations_only() -> None:
    spec: dict[str, Any] = {
        "paths": {
            "/v1/recall": {"post": {"responses": {}}},
            "/v1/users/{user_id}": {"delete": {"responses": {}}, "parameters": []},
            "/healthz": {"get": {"responses": {}}},
            "/metrics": {"get": {"responses": {}}},
        }
    }
    document(spec)
    assert spec["components"]["securitySchemes"][SECURITY_SCHEME]["scheme"] == "bearer"
    assert spec["paths"]["/v1/recall"]["post"]["security"] == [{SECURITY_SCHEME: []}]
    assert spec["paths"]["/v1/users/{user_id}"]["delete"]["security"] == [{SECURITY_SCHEME: []}]
    assert "security" not in spec["paths"]["/healthz"]["get"]
    assert "security" not in spec["paths"]["/metrics"]["get"]
