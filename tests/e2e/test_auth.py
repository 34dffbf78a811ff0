"""API keys end to end: `memstream up`'s operator key, keys made with the CLI, tenant binding, revocation."""

from __future__ import annotations

import asyncio
import stat
import subprocess
import time
import uuid

import httpx
import pytest

from tests.stack import Stack, produce, run_cli, turn, user_path, wait_for

pytestmark = pytest.mark.e2e
TENANT, OTHER = "auth-e2e", "auth-e2e-other"


def memstream(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(stack.env, *args, timeout=120)


def test_up_wrote_an_operator_key_only_its_owner_can_read(stack: Stack) -> None:
    for name in ("api-key", "auth-secret"):
        assert stat.S_IMODE((stack.data_dir / name).stat().st_mode) == 0o600, name
    assert stack.api_key.startswith("ms_")
    assert f"created an operator API key in {stack.data_dir / 'api-key'}" in (stack.data_dir / "up.log").read_text()
    keys = memstream(stack, "keys", "list", "--json")
    assert keys.returncode == 0, keys.stderr
    assert '"tenant_id": null' in keys.stdout
    assert stack.api_key not in keys.stdout


def test_no_key_no_memory(stack: Stack) -> None:
    body = {"tenant_id": TENANT, "user_id": "u", "query": "anything"}
    assert stack.request("POST", "/v1/recall", json=body, headers={}).status_code == 401
    response = stack.request("GET", "/v1/users/u/memories", params={"tenant_id": TENANT}, headers={})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert stack.request("GET", "/readyz", headers={}).status_code == 200


async def test_a_cli_key_reads_its_tenant_only_until_revoked(stack: Stack) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I prefer aisle seats on long flights.")])
    wait_for(lambda: stack.memories(TENANT, user), 60, "memory stored")

    made = memstream(stack, "keys", "create", "--tenant", TENANT, "--role", "read", "--name", "e2e reader")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    mine = {"authorization": f"Bearer {key}"}

    def recall(tenant: str) -> httpx.Response:
        body = {"tenant_id": tenant, "user_id": user, "query": "which seat?", "record_access": False}
        return stack.request("POST", "/v1/recall", json=body, headers=mine)

    own = recall(TENANT)
    assert own.status_code == 200
    assert "aisle" in own.text
    other = recall(OTHER)
    assert other.status_code == 403
    assert "aisle" not in other.text
    assert user not in other.text

    # `memstream recall` sends the operator key from the data dir by itself.
    asked = memstream(stack, "recall", "--tenant", TENANT, "--user", user, "seat")
    assert asked.returncode == 0, asked.stderr
    assert "aisle" in asked.stdout

    key_id = next(line for line in memstream(stack, "keys", "list").stdout.splitlines() if "e2e reader" in line)
    revoked = memstream(stack, "keys", "revoke", key_id.split()[0])
    assert revoked.returncode == 0, revoked.stderr
    started = time.monotonic()
    while recall(TENANT).status_code == 200:
        assert time.monotonic() - started < 5.0 + 2.0, "a revoked key still works after the cache TTL"
        await asyncio.sleep(0.2)
    assert recall(TENANT).status_code == 401
    assert stack.get(f"/v1/users/{user_path(user)}/memories", tenant_id=TENANT).status_code == 200  # the operator
