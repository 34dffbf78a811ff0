"""Through real processes: tansu, Postgres, the worker, Qdrant Edge, HTTP."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from tests.stack import (
    Stack,
    app_restarts,
    opened_dlq,
    produce,
    read_dlq,
    record_fault_figures,
    session_end,
    settle,
    turn,
    wait_for,
)

pytestmark = pytest.mark.e2e
TENANT = "acme"


def new_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def texts(result: dict[str, Any], type_: str | None = None) -> list[str]:
    return [m["text"] for m in result["memories"] if type_ is None or m["type"] == type_]


async def test_a_stated_preference_is_recalled(stack: Stack) -> None:
    user = new_user()
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I prefer window seats when I fly.", channel="web")])

    def recalled() -> dict[str, Any] | None:
        result = stack.recall(TENANT, user, "what seat does the user like on planes?")
        return result if any("window seats" in t for t in texts(result, "preference")) else None

    result = wait_for(recalled, 60, "preference recalled")
    pref = next(m for m in result["memories"] if m["type"] == "preference")
    assert pref["source"]["session_id"] == "s1"
    assert pref["source"]["metadata"] == [{"channel": "web"}]
    assert "[PREFERENCE] User preference: I prefer window seats when I fly." in result["prompt"]
    assert result["prompt"].startswith("<memory>")
    assert result["prompt"].endswith("</memory>")


async def test_an_allergy_and_an_instruction_are_in_every_answer(stack: Stack) -> None:
    """Standing preferences hold whatever is asked: "suggest a snack" is far from "allergic to peanuts"."""
    user = new_user()
    said = [
        "I'm allergic to peanuts.",
        "We repainted the kitchen blue last weekend.",
        "Please never use emojis in your replies.",
        "My sister is visiting from Lisbon in June.",
    ]
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", i, text) for i, text in enumerate(said)])
    wait_for(lambda: len(stack.memories(TENANT, user, type="preference")) == 2 or None, 60, "two preferences")
    preferences = {m["text"]: m for m in stack.memories(TENANT, user, type="preference")}
    assert {m["category"] for m in preferences.values()} == {"constraint", "instruction"}
    assert all(m["importance"] >= 0.9 for m in preferences.values())

    result = stack.recall(TENANT, user, "suggest a snack for movie night", top_k=4, record_access=False)
    assert set(texts(result, "preference")) == set(preferences)
    assert "[PREFERENCE] User preference: I'm allergic to peanuts." in result["prompt"]
    # At most half of top_k: the newest standing preference.
    one = stack.recall(TENANT, user, "what colour is the kitchen?", top_k=2, record_access=False)
    assert texts(one, "preference") == ["User preference: Please never use emojis in your replies."]
    # A types filter still rules.
    only = stack.recall(TENANT, user, "suggest a snack", types=["exchange"], record_access=False)
    assert texts(only, "preference") == []


async def test_a_diet_taken_back_is_no_longer_pinned(stack: Stack) -> None:
    user = new_user()
    then = datetime.now(UTC) - timedelta(days=10)
    await produce(
        stack.bootstrap,
        [
            turn(TENANT, user, "s1", 0, "I'm vegetarian and I love jazz.", ts=then),
            turn(TENANT, user, "s2", 0, "I'm no longer vegetarian, I eat fish now.", ts=then + timedelta(days=5)),
        ],
    )

    def taken_back() -> list[dict[str, Any]] | None:
        old = stack.memories(TENANT, user, type="preference", status="superseded")
        return old or None

    [old] = wait_for(taken_back, 60, "the diet superseded")
    assert old["text"] == "User preference: I'm vegetarian"
    active = {m["text"]: m for m in stack.memories(TENANT, user, type="preference", status="active")}
    retraction = active["User preference: I'm no longer vegetarian, I eat fish now."]
    assert (retraction["category"], retraction["value"]) == ("retraction", "vegetarian")
    assert old["superseded_by"] == retraction["id"]
    assert "User preference: I love jazz." in active
    result = stack.recall(TENANT, user, "suggest a dinner recipe", record_access=False)
    assert "User preference: I'm vegetarian" not in texts(result, "preference")
    # As of a moment before the retraction, the diet was true.
    before = stack.recall(TENANT, user, "am I vegetarian?", as_of=(then + timedelta(days=1)).isoformat())
    assert "User preference: I'm vegetarian" in texts(before, "preference")


async def test_what_was_said_is_recalled_even_when_no_rule_matched(stack: Stack) -> None:
    user = new_user()
    said = "We went hiking near the glacier lake yesterday and it rained all afternoon."
    await produce(
        stack.bootstrap,
        [turn(TENANT, user, "s1", 0, said), turn(TENANT, user, "s1", 1, "Sounds wet!", role="assistant")],
    )

    def recalled() -> dict[str, Any] | None:
        result = stack.recall(TENANT, user, "how was the hike?")
        return result if said in texts(result, "exchange") else None

    result = wait_for(recalled, 60, "exchange memory recalled through the vector index")
    hit = next(m for m in result["memories"] if m["text"] == said)
    assert hit["source"]["session_id"] == "s1"
    assert hit["score"] > 0
    assert f"[EXCHANGE] {said}" in result["prompt"]


async def test_a_move_supersedes_the_old_location_and_keeps_history(stack: Stack) -> None:
    user = new_user()
    await produce(stack.bootstrap, [turn(TENANT, user, "s1", 0, "I live in Pune.")])
    wait_for(lambda: any("Pune" in t for t in texts(stack.recall(TENANT, user, "where do I live"), "fact")), 60, "Pune")
    await produce(stack.bootstrap, [turn(TENANT, user, "s2", 0, "I moved from Pune to Berlin.")])

    def moved() -> dict[str, Any] | None:
        result = stack.recall(TENANT, user, "where does the user live?")
        return result if "User lives in Berlin" in texts(result, "fact") else None

    result = wait_for(moved, 60, "Berlin fact")
    facts = texts(result, "fact")
    assert "User lives in Pune" not in facts
    assert not any("Pune" in t for t in texts(result, "fact") + texts(result, "preference"))
    berlin = next(m for m in result["memories"] if m["text"] == "User lives in Berlin")
    history = stack.get(f"/v1/users/{user}/memories/{berlin['id']}/history", tenant_id=TENANT).json()["chain"]
    assert [(h["value"], h["status"]) for h in history] == [("Pune", "superseded"), ("Berlin", "active")]
    assert history[0]["superseded_by"] == berlin["id"]
    assert history[0]["superseded_at"] is not None
    # The history of another user's memory is not reachable with this id.
    other = stack.get(f"/v1/users/{new_user()}/memories/{berlin['id']}/history", tenant_id=TENANT)
    assert other.status_code == 404


async def test_another_users_memories_never_appear(stack: Stack) -> None:
    alice, bob = new_user(), new_user()
    await produce(
        stack.bootstrap,
        [
            turn(TENANT, alice, "sa", 0, "My favorite color is ultramarine blue."),
            turn(TENANT, bob, "sb", 0, "I love the color orange."),
            turn("other-tenant", alice, "sc", 0, "I love ultramarine paint for my art."),
        ],
    )
    wait_for(lambda: texts(stack.recall(TENANT, bob, "favorite color")), 60, "bob's memories")
    wait_for(lambda: texts(stack.recall("other-tenant", alice, "favorite color")), 60, "other tenant's memories")
    result = wait_for(lambda: (r := stack.recall(TENANT, alice, "ultramarine color")) and texts(r) and r, 60, "alice")
    for memory in result["memories"]:
        assert "orange" not in memory["text"]
        assert "paint" not in memory["text"]
    assert all(m["source"]["session_id"] == "sa" for m in result["memories"])
    listed = stack.memories(TENANT, bob)
    assert listed
    assert all(m["user_id"] == bob and m["tenant_id"] == TENANT for m in listed)


def test_requests_without_tenant_or_user_are_rejected(stack: Stack) -> None:
    for body in (
        {"user_id": "u", "query": "q"},
        {"tenant_id": "t", "query": "q"},
        {"tenant_id": "", "user_id": "u", "query": "q"},
    ):
        response = stack.post("/v1/recall", body)
        assert response.status_code == 422
        assert response.json()["error"]["details"][0]["loc"][-1] in {"tenant_id", "user_id"}
    assert stack.get("/v1/users/u/memories").status_code == 422
    assert stack.get("/v1/sessions/s/working", tenant_id="t").status_code == 422


async def test_bad_input_lands_in_the_dlq_with_a_reason_and_the_stage_carries_on(stack: Stack) -> None:
    user = new_user()
    marker = uuid.uuid4().hex
    bad_json = b'{"event_id": "' + marker.encode() + b'", broken'
    bad_schema = orjson.dumps({**turn(TENANT, user, "s", 0, "x"), "role": "robot", "event_id": f"{marker}-schema"})
    too_big = orjson.dumps(turn(TENANT, user, "s", 1, "y" * 70_000) | {"event_id": f"{marker}-big"})
    good = turn(TENANT, user, "s", 2, "I really like sourdough bread.")
    await produce(stack.bootstrap, [bad_json, bad_schema, too_big, good])
    wait_for(lambda: texts(stack.recall(TENANT, user, "bread"), "preference"), 60, "good turn after bad ones")
    raw = await read_dlq(stack.bootstrap, at_least=3, quiet=3)
    # A value naming its user is sealed with their key: in clear the DLQ shows none of its words.
    assert not any(e.value and b"robot" in e.value and marker.encode() in e.value for e in raw)
    entries = await opened_dlq(stack, raw)
    reasons = {e.value: e.reason for e in entries if e.value and marker.encode() in e.value}
    assert reasons[bad_json] == "invalid_json"
    assert reasons[bad_schema] == "schema_violation"
    assert reasons[too_big] == "oversized"
    metrics = stack.get("/metrics").text
    assert 'memstream_dlq_messages_total{reason="oversized",stage="window"}' in metrics


async def test_working_window_and_session_end_summary(stack: Stack) -> None:
    user = new_user()
    events = [
        turn(
            TENANT,
            user,
            "w1",
            i,
            f"Turn {i}: we discussed the Lisbon marathon training plan, week {i}.",
            role="user" if i % 2 == 0 else "assistant",
        )
        for i in range(24)
    ]
    await produce(stack.bootstrap, [*events, session_end(TENANT, user, "w1")])

    expected = sorted(e["event_id"] for e in events)

    def episodes() -> list[dict[str, Any]] | None:
        # Eviction episodes arrive first; wait for the session-end one too.
        found = stack.memories(TENANT, user, type="episode")
        covered = sorted(e for m in found for e in m["source"]["event_ids"])
        return found if len(found) >= 2 and set(covered) == set(expected) else None

    found = wait_for(episodes, 60, "episodes from eviction and session end")
    covered = sorted(e for m in found for e in m["source"]["event_ids"])
    assert covered == expected  # every turn summarized exactly once
    window = stack.get("/v1/sessions/w1/working", tenant_id=TENANT, user_id=user).json()
    assert window["closed"] is True
    assert window["turns"] == []


def kill_running_app(stack: Stack) -> int:
    """SIGKILL the app process the supervisor runs now; its pid.

    An app that exited on its own meanwhile (once, under a heavily loaded
    machine, before the second kill) is being restarted: its successor is
    killed, and up.log's count of restarts, reported below, shows the extra one.
    """

    def running() -> int | None:
        pid = stack.app_pid()
        os.kill(pid, 0)  # ProcessLookupError (an OSError) while the supervisor has not restarted it yet
        return pid

    pid = wait_for(running, 60, "a running app")
    os.kill(pid, signal.SIGKILL)
    return pid


async def test_worker_killed_mid_stream_loses_nothing_and_duplicates_nothing(stack: Stack) -> None:
    """SIGKILL the app twice while 12 sessions stream in and close: no turn lost or doubled, episodes included.

    The first kill lands while the window is still taking turns, the second
    while candidates and session ends are in flight downstream; the
    supervisor restarts the app each time and redelivery must be harmless.
    """
    user = new_user()
    sessions = [f"k{i}" for i in range(12)]
    events = [
        turn(TENANT, user, f"k{i // 10}", i % 10, f"Note number {i}: remember item {uuid.uuid4().hex[:6]}.")
        for i in range(120)
    ]
    ends = [session_end(TENANT, user, s) for s in sessions]
    restarts_before = app_restarts(stack)
    started = time.monotonic()
    await produce(stack.bootstrap, events[:60] + ends[:6])
    wait_for(lambda: len(stack.memories(TENANT, user, type="exchange")) >= 5, 60, "some progress")
    pids = [kill_running_app(stack)]
    await produce(stack.bootstrap, events[60:])
    wait_for(lambda: stack.app_pid() != pids[-1], 60, "supervisor restarted the app")
    wait_for(lambda: len(stack.memories(TENANT, user, type="exchange")) >= 65, 120, "progress after the restart")
    await produce(stack.bootstrap, ends[6:])
    pids.append(kill_running_app(stack))
    pids.append(wait_for(lambda: (pid := stack.app_pid()) != pids[-1] and pid, 60, "supervisor restarted the app"))
    killed_at = time.monotonic()
    expected = sorted(e["event_id"] for e in events)

    def all_there() -> bool:
        exchanges = stack.memories(TENANT, user, type="exchange")
        episodes = stack.memories(TENANT, user, type="episode")
        covered = {e for m in episodes for e in m["source"]["event_ids"]}
        return len(exchanges) >= len(events) and covered >= set(expected)

    recovered = settle(all_there, 180)
    found = stack.memories(TENANT, user, type="exchange")
    sources = Counter(e for m in found for e in m["source"]["event_ids"])
    episodes = Counter(e for m in stack.memories(TENANT, user, type="episode") for e in m["source"]["event_ids"])
    ours = [e for e in await read_dlq(stack.bootstrap, quiet=2, within=20) if user.encode() in (e.value or b"")]
    record_fault_figures(
        "worker_sigkill_mid_stream",
        turns_streamed=len(events),
        session_ends=len(ends),
        kills=len(pids) - 1,
        app_restarts=app_restarts(stack) - restarts_before,
        lost=sum(1 for e in expected if sources[e] == 0),
        duplicated=sum(1 for e in expected if sources[e] > 1),
        episode_lost=sum(1 for e in expected if episodes[e] == 0),
        episode_duplicated=sum(1 for e in expected if episodes[e] > 1),
        dlq=len(ours),
        seconds_streaming=round(killed_at - started, 1),
        seconds_to_recover=None if recovered is None else round(recovered, 1),
    )
    assert recovered is not None, "not every turn became memory within 180 s of the last kill"
    assert sorted(sources.elements()) == expected
    assert sorted(episodes.elements()) == expected  # every turn summarized exactly once
    assert all(m["reinforcement_count"] == 0 and m["version"] == 1 for m in found)
    assert ours == [], "a crash sent this user's turns to the DLQ"
    # And the recall index agrees: each turn is findable, once.
    result = stack.recall(TENANT, user, "Note number 7: remember item", top_k=100, token_budget=20_000)
    ids = [m["id"] for m in result["memories"]]
    assert len(ids) == len(set(ids))
