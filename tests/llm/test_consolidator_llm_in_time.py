"""An LLM verdict from a statement observed before its target never replaces the newer target.

Same fake server and harness as tests/llm/test_consolidator_llm.py: the stored
preference is observed at T0; these candidates were said an hour before it and
arrive after it (a backfill).
"""

from __future__ import annotations

from collections.abc import Callable

from schemas import codec
from tests.agents.test_agents import Harness
from tests.llm.fake_openai import FakeOpenAI, answer
from tests.llm.test_consolidator_llm import (  # the fixture, and the stored memory it writes
    COFFEE,
    FAR,
    OLD_ID,
    consolidator,
    memory_ids,
    preference,
    statuses,
)

__all__ = ["consolidator"]
EARLIER = preference(COFFEE, "User preference: I switched to black coffee in the mornings.", "e2", [0.8, 0.6, 0.0], -1)
# Unrelated, asks the model nothing: once its change is out, the batch holding EARLIER was decided.
FAR_LATER = preference(FAR, "User preference: I prefer aisle seats.", "e4", [0.0, 0.0, 1.0], 3)


async def test_an_update_from_an_older_statement_stores_it_as_history_and_keeps_the_target(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes = h.sink("changes")
    fake.queue(answer({"action": "UPDATE", "target_id": OLD_ID, "reason": "the morning drink changed"}))
    await h.feed([codec.dumps(EARLIER)], lambda: bool(changes.sent))
    (coffee,) = await memory_ids(h, COFFEE)
    [change] = await h.changes()
    record = change["record"]
    assert (change["op"], record["id"], record["status"], record["superseded_by"]) == (
        "superseded",
        coffee,
        "superseded",
        OLD_ID,
    )
    assert record["superseded_at"] == "2026-05-01T00:00:00Z"  # until the target was observed
    assert await statuses(h) == {OLD_ID: "active", coffee: "superseded"}


async def test_a_delete_from_an_older_statement_changes_nothing(
    consolidator: Callable[[], Harness], fake: FakeOpenAI
) -> None:
    h = consolidator()
    changes = h.sink("changes")
    fake.queue(answer({"action": "DELETE", "target_id": OLD_ID, "reason": "no longer true"}))
    await h.feed([codec.dumps(EARLIER), codec.dumps(FAR_LATER)], lambda: bool(changes.sent))
    (far,) = await memory_ids(h, FAR)
    assert [(c["op"], c["record"]["id"]) for c in await h.changes()] == [("added", far)]
    assert await statuses(h) == {OLD_ID: "active", far: "active"}
    assert len(fake.requests) == 1
