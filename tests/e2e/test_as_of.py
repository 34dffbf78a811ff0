"""Point-in-time recall through the whole pipeline: a move sent over HTTP, asked about before and after it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.stack import Stack, turn, wait_for

pytestmark = pytest.mark.e2e
TENANT = "as-of"
QUERY = "where does the user live?"


def facts(stack: Stack, user: str, as_of: datetime | None = None) -> list[str]:
    extra: dict[str, Any] = {"types": ["fact"], "record_access": False}
    if as_of is not None:
        extra["as_of"] = as_of.isoformat()
    return [m["text"] for m in stack.recall(TENANT, user, QUERY, **extra)["memories"]]


def test_as_of_between_a_statement_and_its_correction_answers_with_the_old_value(stack: Stack) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC)
    said, moved = now - timedelta(hours=2), now - timedelta(hours=1)
    sent = stack.request("POST", "/v1/turns", json=turn(TENANT, user, "s1", 0, "I live in Berlin.", ts=said))
    assert sent.status_code == 202, sent.text
    wait_for(lambda: facts(stack, user) == ["User lives in Berlin"], 60, "Berlin fact")
    sent = stack.request("POST", "/v1/turns", json=[turn(TENANT, user, "s2", 0, "I moved to Paris.", ts=moved)])
    assert sent.status_code == 202, sent.text
    wait_for(lambda: facts(stack, user) == ["User lives in Paris"], 60, "Paris fact superseding Berlin")

    assert facts(stack, user, moved - timedelta(minutes=30)) == ["User lives in Berlin"]
    assert facts(stack, user, moved + timedelta(minutes=30)) == ["User lives in Paris"]
    assert facts(stack, user, said - timedelta(minutes=30)) == []
    assert facts(stack, user, now + timedelta(days=365)) == ["User lives in Paris"]  # the future: like now
    # Unfiltered, the past answer holds what was said then and nothing said after it.
    then = stack.recall(TENANT, user, QUERY, as_of=(moved - timedelta(minutes=30)).isoformat(), record_access=False)
    assert "User lives in Berlin" in [m["text"] for m in then["memories"]]
    assert not any("Paris" in m["text"] for m in then["memories"])
    assert then["working"] is None
