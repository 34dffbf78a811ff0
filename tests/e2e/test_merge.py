"""Semantic dedup through the real pipeline: two phrasings of one preference become one memory."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.changes import stack_changes
from tests.stack import Stack, embedded_stack, produce, stack_settings, turn, user_path, wait_for

pytestmark = pytest.mark.e2e
TENANT = "acme"
FIRST = "I really love hiking in the mountains."
SECOND = "I love hiking in mountains a lot."


@pytest.fixture(scope="module")
def merge_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with embedded_stack(Path(tmp_path_factory.mktemp("merge"))) as running:
        yield running


def preferences(stack: Stack, user: str) -> list[dict[str, Any]]:
    return [m for m in stack.memories(TENANT, user) if m["type"] == "preference"]


async def changes_for(stack: Stack, user: str, wanted_op: str) -> list[dict[str, Any]]:
    """The user's changes on memory.changes, opened as subscribers open them, once one of them is `wanted_op`."""

    def mine(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for c in found if c["user_id"] == user]

    found = await stack_changes(stack_settings(stack), lambda found: any(c["op"] == wanted_op for c in mine(found)))
    return mine(found)


def merged_pair(stack: Stack, user: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    prefs = preferences(stack, user)
    active = [m for m in prefs if m["status"] == "active"]
    merged = [m for m in prefs if m["status"] == "merged"]
    return (active[0], merged[0]) if len(active) == 1 and len(merged) == 1 else None


async def check_merged(stack: Stack, user: str) -> None:
    active, merged = wait_for(lambda: merged_pair(stack, user), 60, "one active preference and one merged")
    assert merged["superseded_by"] == active["id"]
    # The survivor holds both statements' sources; the tie in specificity keeps the first wording.
    assert active["text"] == f"User preference: {FIRST}"
    assert len(active["source"]["event_ids"]) == 2
    history = stack.get(f"/v1/users/{user_path(user)}/memories/{active['id']}/history", tenant_id=TENANT)
    chain = history.json()["chain"]
    assert sorted((h["status"], h["text"]) for h in chain) == [
        ("active", f"User preference: {FIRST}"),
        ("merged", f"User preference: {SECOND}"),
    ]
    changes = await changes_for(stack, user, "merged")
    merges = [c for c in changes if c["op"] == "merged"]
    assert [c["record"]["id"] for c in merges] == [merged["id"]]
    assert merges[0]["reason"].startswith("similarity 0.9")
    recalled = stack.recall(TENANT, user, "does the user like hiking?")
    assert [m["id"] for m in recalled["memories"] if m["type"] == "preference"] == [active["id"]]


async def test_two_phrasings_in_separate_batches_merge(merge_stack: Stack) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    await produce(merge_stack.bootstrap, [turn(TENANT, user, "s1", 0, FIRST)])
    wait_for(lambda: preferences(merge_stack, user), 60, "first preference stored")
    await produce(merge_stack.bootstrap, [turn(TENANT, user, "s2", 0, SECOND)])
    await check_merged(merge_stack, user)


async def test_two_phrasings_in_one_batch_merge(merge_stack: Stack) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    await produce(merge_stack.bootstrap, [turn(TENANT, user, "s1", 0, FIRST), turn(TENANT, user, "s1", 1, SECOND)])
    await check_merged(merge_stack, user)
