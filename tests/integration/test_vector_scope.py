"""Forgetting a user in the index, alike on both engines: delete and count by tenant and user, versions by id."""

from __future__ import annotations

import dataclasses

import pytest

from services.stores.vector import VectorIndex
from tests.integration.test_vector_indexes import index as index  # the fixture: alice x3 (one superseded), bob x1
from tests.integration.test_vector_indexes import point

ALICE_TEA = "00000000-0000-0000-0000-000000000001"
BOB_TEA = "00000000-0000-0000-0000-000000000003"


async def test_delete_scope_removes_every_point_of_one_user_and_no_other(index: VectorIndex) -> None:
    other_tenant = point("00000000-0000-0000-0000-000000000005", "alice", "tea elsewhere", [1, 0, 0])
    await index.upsert([dataclasses.replace(other_tenant, payload={**other_tenant.payload, "tenant_id": "t2"})])
    assert (await index.count_scope("t", "alice"), await index.count_scope("t", "bob")) == (3, 1)
    assert await index.count_scope("t2", "alice") == 1
    await index.delete_scope("t", "alice")
    assert await index.count_scope("t", "alice") == 0  # the superseded point too
    assert (await index.count_scope("t", "bob"), await index.count_scope("t2", "alice")) == (1, 1)
    assert await index.count() == 2
    await index.delete_scope("t", "alice")  # nothing left: no error
    assert await index.count() == 2


async def test_versions_answer_for_the_users_own_points_only(index: VectorIndex) -> None:
    versioned = point(ALICE_TEA, "alice", "I love green tea", [1, 0, 0])
    await index.upsert([dataclasses.replace(versioned, payload={**versioned.payload, "version": 7})])
    missing = "00000000-0000-0000-0000-0000000000ff"
    assert await index.versions("t", "alice", [ALICE_TEA, BOB_TEA, missing]) == {ALICE_TEA: 7}
    assert await index.versions("t", "bob", [ALICE_TEA, BOB_TEA]) == {BOB_TEA: 0}
    assert await index.versions("t", "alice", []) == {}


async def test_a_scope_operation_needs_tenant_and_user(index: VectorIndex) -> None:
    for tenant, user in (("", "alice"), ("t", "")):
        with pytest.raises(ValueError, match="tenant_id and user_id"):
            await index.delete_scope(tenant, user)
        with pytest.raises(ValueError, match="tenant_id and user_id"):
            await index.count_scope(tenant, user)
    assert await index.count() == 4
