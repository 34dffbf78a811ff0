"""Open questions end to end: asked and left open, surfaced in a later session, tentatively answered."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.stack import Stack, produce, session_end, turn, wait_for

pytestmark = pytest.mark.e2e
TENANT = "acme"


def questions(stack: Stack, user: str) -> list[dict[str, Any]]:
    return stack.memories(TENANT, user, type="question")


async def test_an_open_question_is_surfaced_later_and_tentatively_resolved(stack: Stack) -> None:
    user = f"q-{uuid.uuid4().hex[:8]}"
    day1 = datetime.now(UTC) - timedelta(days=3)
    await produce(
        stack.bootstrap,
        [
            turn(TENANT, user, "s1", 0, "Which visa do I need for the Japan conference trip?", ts=day1),
            turn(TENANT, user, "s1", 1, "I'm not sure, it depends on your passport.", role="assistant", ts=day1),
            session_end(TENANT, user, "s1", ts=day1 + timedelta(seconds=5)),
        ],
    )
    (asked,) = wait_for(lambda: questions(stack, user) or None, 60, "the open question")
    assert asked["question"]["state"] == "open"
    assert asked["text"] == "Which visa do I need for the Japan conference trip?"

    result = stack.recall(TENANT, user, "planning the Japan conference", record_access=False)
    surfaced = [m for m in result["memories"] if m["surfaced"] == "open_question"]
    assert [m["id"] for m in surfaced] == [asked["id"]]
    assert "<open_questions>" in result["prompt"]
    assert "[OPEN QUESTION] Which visa do I need for the Japan conference trip?" in result["prompt"]

    await produce(
        stack.bootstrap, [turn(TENANT, user, "s2", 0, "Turns out the Japan conference visa is a short business visa.")]
    )

    def resolved() -> dict[str, Any] | None:
        (q,) = questions(stack, user)
        return q if q["question"]["state"] == "tentatively_resolved" else None

    done = wait_for(resolved, 60, "the question tentatively resolved")
    assert done["version"] == asked["version"] + 1
    after = stack.recall(TENANT, user, "planning the Japan conference", record_access=False)
    assert not [m for m in after["memories"] if m["surfaced"]]
