"""Access marks end to end, on a stack of its own: recall → (coalesced) memory.commands → consolidator → Postgres.

Reads never grow the feed: no access change reaches memory.changes, and the
marked rows keep their version; recall still ranks by the access in Postgres.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.changes import stack_changes
from tests.stack import Stack, embedded_stack, produce, stack_settings, turn, wait_for

pytestmark = pytest.mark.e2e
TENANT = "acme"
QUERY = "what seat does the user like on planes?"


@pytest.fixture(scope="module")
def access_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A short window: the two recalls below fall in one (or two) of them, either way one mark per memory each.
    with embedded_stack(
        Path(tmp_path_factory.mktemp("access-stack")), extra_env={"MEMSTREAM_ACCESS_FLUSH_SECONDS": "1"}
    ) as running:
        yield running


def by_id(memories: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in memories}


async def test_two_recalls_mark_each_returned_memory_twice(access_stack: Stack) -> None:
    stack, user = access_stack, f"user-{uuid.uuid4().hex[:8]}"
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I prefer window seats when I fly.")])

    # Wait on the list route, not on recall: every recall that returns something marks it.
    def both_stored() -> list[dict[str, Any]] | None:
        found = stack.memories(TENANT, user, status="active")
        return found if len(found) >= 2 else None

    stored = wait_for(both_stored, 60, "preference and exchange stored")
    assert all(m["access_count"] == 0 for m in stored)
    assert all(m["last_accessed_at"] is None for m in stored)
    wait_for(lambda: 'memstream_freshness_seconds_count{store="qdrant"}' in stack.get("/metrics").text, 30, "indexed")

    returned = Counter(m["id"] for _ in range(2) for m in stack.recall(TENANT, user, QUERY)["memories"])
    twice = {memory_id for memory_id, n in returned.items() if n == 2}
    assert twice, returned  # the preference at least: pinned from Postgres on every recall

    def marked() -> dict[str, dict[str, Any]] | None:
        now = by_id(stack.memories(TENANT, user))
        return now if all(now[i]["access_count"] == returned[i] for i in returned) else None

    after = wait_for(marked, 60, "access marks applied")
    for memory_id in twice:
        assert after[memory_id]["access_count"] == 2
        assert after[memory_id]["last_accessed_at"] is not None
        assert after[memory_id]["version"] == by_id(stored)[memory_id]["version"]  # an access is no change
    assert all(m["access_count"] == 0 for i, m in after.items() if i not in returned)

    # Nothing of the reads on the feed: the user's changes are the ones that stored the memories.
    changes = await stack_changes(stack_settings(stack), lambda found: False, within=5)
    mine = [c for c in changes if c["user_id"] == user]
    assert mine
    assert all(c["reason"] != "access" for c in mine)
    assert {(c["record"]["id"], c["record"]["version"]) for c in mine} >= {(m["id"], m["version"]) for m in stored}

    # Recall reads access from Postgres: the marked memories are still found, with their access signal.
    def ranked_with_access() -> dict[str, dict[str, Any]] | None:
        now = by_id(stack.recall(TENANT, user, QUERY)["memories"])
        return now if twice <= now.keys() and all(now[i]["signals"]["access"] > 0 for i in twice) else None

    found = wait_for(ranked_with_access, 30, "access signal in recall")
    assert all(found[i]["access_count"] >= 2 for i in twice)
