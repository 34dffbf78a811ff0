"""No input stalls the pipeline: while one tenant's worst turns are processed, another tenant's turn is recallable.

The default stack runs the stages and the read service in one process, on
one event loop. A turn built to make a rule backtrack (tests/pathological.py:
"moved from Pune " over a third of the content limit, then spaces, took the
old location rule hours) must neither hold that loop nor the window stage
that every tenant's turns go through.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.pathological import CONTENT_LIMIT, pathological_turns
from tests.stack import Stack, embedded_stack, turn, wait_for

pytestmark = pytest.mark.e2e
WORST = "cue 'moved from Pune ' repeated, then spaces"
HEAVY_TURNS = 4
FRESH_WITHIN = 5.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own: the worst turns must not slow another file's tests."""
    with embedded_stack(Path(tmp_path_factory.mktemp("stall"))) as running:
        yield running


def extractions_counted(stack: Stack) -> float:
    """Turns the rules extracted in the stack's process (its /metrics), all tenants."""
    for family in text_string_to_metric_families(stack.request("GET", "/metrics", timeout=5).text):
        if family.name == "memstream_rules_extract_seconds":
            return sum(s.value for s in family.samples if s.name.endswith("_count"))
    return 0.0


def test_another_tenants_turn_is_recallable_within_5s_while_a_pathological_maximal_turn_is_processed(
    stack: Stack,
) -> None:
    worst = pathological_turns()[WORST]
    assert len(worst.encode()) <= CONTENT_LIMIT
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    counted = extractions_counted(stack)
    for i in range(HEAVY_TURNS):
        distinct = f"{i}{worst[1:]}"  # four memories, not one reinforced four times
        response = stack.request("POST", "/v1/turns", json=turn("stall-a", a, "s", i, distinct))
        assert response.status_code == 202, response.text

    sent = time.monotonic()
    said = turn("stall-b", b, "s", 0, "I really like cardamom buns with my coffee.")
    assert stack.request("POST", "/v1/turns", json=said).status_code == 202
    latencies: list[float] = []

    def b_recalled() -> bool:
        started = time.monotonic()
        found = stack.recall("stall-b", b, "what pastry does the user like?", record_access=False)["memories"]
        latencies.append(time.monotonic() - started)
        return any("cardamom buns" in m["text"] for m in found)

    wait_for(b_recalled, FRESH_WITHIN, "tenant B's turn recallable while tenant A's worst turns are processed")
    fresh = time.monotonic() - sent
    print(f"tenant B recallable after {fresh:.2f} s; {len(latencies)} recalls, slowest {max(latencies):.3f} s")

    # Tenant A's turns were taken, not refused: extracted by the rules and stored as exchanges.
    wait_for(lambda: extractions_counted(stack) >= counted + HEAVY_TURNS, 60, "tenant A's turns extracted")
    wait_for(lambda: len(stack.memories("stall-a", a)) >= HEAVY_TURNS, 120, "tenant A's turns stored")
    assert max(latencies) < 2.0  # a read held behind the stage would wait for the whole turn
