"""Maintenance and idle-session closing through real processes, on a stack of their own."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from tests.stack import ROOT, Stack, embedded_stack, produce, session_end, turn, user_path, wait_for

pytestmark = pytest.mark.e2e
TENANT = "acme"
HALF_LIFE_DAYS, GRACE_DAYS = 180.0, 7.0  # the defaults
# One theme: every two episode summaries have cosine ≥ 0.82 (MiniLM), so complete-link clustering at 0.8
# takes all six; episodes are never merged by the consolidator, however alike.
SESSION_TALK = [
    "The marathon training long run left my legs sore.",
    "The marathon training long run went well in the rain.",
    "The marathon training long run felt easier than last week.",
    "The marathon training long run was hilly and slow.",
    "The marathon training long run ended with a fast finish.",
    "The marathon training long run made me very hungry.",
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    idle = {"MEMSTREAM_SESSION_IDLE": "3", "MEMSTREAM_SESSION_IDLE_CHECK_SECONDS": "1"}
    with embedded_stack(Path(tmp_path_factory.mktemp("maint")), extra_env=idle) as running:
        yield running


def maintain(stack: Stack, user: str, now: datetime) -> str:
    env = stack.env
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "maintain",
            "--now",
            now.isoformat(),
            "--tenant",
            TENANT,
            "--user",
            user,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


def snapshot(stack: Stack, user: str) -> dict[str, tuple[Any, ...]]:
    return {
        m["id"]: (m["status"], m["version"], m["importance"], m["compressed"], m["superseded_by"])
        for m in stack.memories(TENANT, user)
    }


def fade(memory: dict[str, Any], now: datetime, since: datetime | None = None) -> tuple[float, str]:
    """Importance and status as of `now` of a memory never accessed: it halves every 180 days past the 7-day
    grace after it was observed (or past `since`, when its importance was last current), and a memory under
    0.1 is pruned if it is an exchange or a question (no other type is)."""
    start = since or datetime.fromisoformat(memory["observed_at"]) + timedelta(days=GRACE_DAYS)
    importance = memory["importance"] * 0.5 ** ((now - start) / timedelta(days=HALF_LIFE_DAYS))
    kept = importance >= 0.1 or memory["type"] not in ("exchange", "question")
    return importance, "active" if kept else "pruned"


def synthesis(memory: dict[str, Any]) -> dict[str, Any]:
    """A pattern's or semantic memory's own provenance entry: its members and their sessions."""
    [entry] = [m for m in memory["source"]["metadata"] if "memory_ids" in m]
    return entry


def refs(memory: dict[str, Any]) -> set[str]:
    """The turn references (the test's stand-in for LoCoMo's `dia_id`) in a memory's provenance."""
    return {m["ref"] for m in memory["source"]["metadata"] if "ref" in m}


def settled(stack: Stack, user: str, quiet: float = 3.0) -> bool:
    """No memory of the user changed for `quiet` seconds: the pipeline is done with its turns."""
    first = snapshot(stack, user)
    time.sleep(quiet)
    return bool(first) and snapshot(stack, user) == first


async def test_maintenance_decays_prunes_compresses_and_synthesizes_once(stack: Stack) -> None:
    user = f"runner-{uuid.uuid4().hex[:8]}"
    events: list[dict[str, Any]] = []
    for s, said in enumerate(SESSION_TALK):
        session = f"run{s}"
        opening = f"I am training for the Berlin marathon and did a long run of {20 + 2 * s} kilometers this weekend."
        events += [
            turn(TENANT, user, session, 0, opening, ref=f"{session}:0"),
            turn(TENANT, user, session, 1, said, ref=f"{session}:1"),
        ]
        events.append(session_end(TENANT, user, session))
    await produce(stack.bootstrap, events)
    wait_for(lambda: len(stack.memories(TENANT, user, type="episode")) >= 6, 90, "six episodes", interval=0.5)
    wait_for(lambda: settled(stack, user), 60, "memories settled", interval=0.5)
    before = {m["id"]: m for m in stack.memories(TENANT, user) if m["status"] == "active"}

    later = datetime.now(UTC) + timedelta(days=365)
    out = maintain(stack, user, later)
    assert "patterns=1" in out, out

    after = {m["id"]: m for m in stack.memories(TENANT, user)}
    for rid, old in before.items():
        assert after[rid]["version"] == old["version"] + 1, (old, after[rid])
        assert (after[rid]["importance"], after[rid]["status"]) == pytest.approx(fade(old, later), abs=1e-4)
    [pattern] = stack.memories(TENANT, user, type="pattern")
    episodes = {e["id"]: e for e in stack.memories(TENANT, user, type="episode", status="active")}
    members = set(synthesis(pattern)["memory_ids"])
    assert len(members) >= 5
    assert members <= set(episodes)
    assert all(episodes[i]["compressed"] == (i in members) for i in episodes)
    assert "marathon" in pattern["text"]
    assert set(pattern["source"]["event_ids"]) == {x for i in members for x in episodes[i]["source"]["event_ids"]}
    # The members' per-turn metadata comes along: a pattern is found by the turns it stands for.
    assert refs(pattern) == {r for i in members for r in refs(episodes[i])}
    assert len(refs(pattern)) == 2 * len(members)

    # One topic: the summaries' topics "training", "marathon" and "long" are carried by the same six episodes.
    [semantic] = stack.memories(TENANT, user, type="semantic", status="active")
    assert (semantic["key_name"], semantic["category"]) == ("training", "training, marathon, long"), semantic
    assert len(synthesis(semantic)["session_ids"]) == len(SESSION_TALK)
    assert refs(semantic) == {f"run{s}:{i}" for s in range(len(SESSION_TALK)) for i in (0, 1)}

    # The index follows memory.changes: synthesized memories are recalled, compressed episodes are not.
    def indexed() -> dict[str, Any] | None:
        result = stack.recall(TENANT, user, "marathon training long run", top_k=50)
        types = {m["type"] for m in result["memories"]}
        return result if "pattern" in types and "semantic" in types else None

    first = snapshot(stack, user)
    again = maintain(stack, user, later)
    assert snapshot(stack, user) == first
    assert again.strip().endswith(": users=1"), again  # no effect counted

    # Compressed episodes stay indexed, flagged: only `include_compressed` brings them back.
    # (`record_access: false`, so looking changes nothing before the passes below.)
    def with_compressed() -> dict[str, Any] | None:
        result = stack.recall(
            TENANT, user, "marathon training long run", top_k=50, include_compressed=True, record_access=False
        )
        return result if any(m["id"] in members for m in result["memories"]) else None

    wait_for(with_compressed, 60, "compressed episodes recalled with include_compressed", interval=0.5)
    plain = stack.recall(TENANT, user, "marathon training long run", top_k=50, record_access=False)
    assert not [m for m in plain["memories"] if m["id"] in members]

    # Six more passes, 6 h apart, and one 60 days on: everything from a year ago goes on fading by time
    # unseen, not by passes. The pattern and semantic memories were written at the first pass, so they fade
    # from then (their importance was current when written).
    last = later + timedelta(days=60)
    for when in [*(later + timedelta(hours=6 * k) for k in range(1, 7)), last]:
        maintain(stack, user, when)
    final = {m["id"]: m for m in stack.memories(TENANT, user)}
    for rid, old in before.items():
        if after[rid]["status"] == "active":
            assert (final[rid]["importance"], final[rid]["status"]) == pytest.approx(fade(old, last), abs=1e-4)
    pruned = stack.memories(TENANT, user, status="pruned")
    assert pruned, "exchanges (0.3) fall under the floor"
    assert {m["type"] for m in pruned} == {"exchange"}
    for m in (pattern, semantic):
        written = {**m, "importance": first[m["id"]][2]}
        assert final[m["id"]]["status"] == "active"
        assert final[m["id"]]["importance"] == pytest.approx(fade(written, last, since=later)[0], abs=1e-4)

    # Recall after the passes: its access marks are writes of their own.
    recalled = wait_for(indexed, 60, "pattern and semantic memories in the index", interval=0.5)
    assert not [m for m in recalled["memories"] if m["id"] in members]


async def read_session_ends(bootstrap: str, session: str, want: int) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(
        "chat.turns",
        bootstrap_servers=bootstrap,
        group_id=f"test-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    found: list[dict[str, Any]] = []
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        while len(found) < want and datetime.now(UTC) < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for m in messages:
                    value = orjson.loads(m.value)
                    if value.get("session_id") == session and value.get("type") == "session_end":
                        found.append(value)
        return found
    finally:
        await consumer.stop()


async def test_an_idle_session_closes_itself_through_the_log(stack: Stack) -> None:
    user = f"quiet-{uuid.uuid4().hex[:8]}"
    session = "idle1"
    first = [
        turn(TENANT, user, session, 0, "I am planning a trip to Lisbon in May with my sister."),
        turn(TENANT, user, session, 1, "Lisbon in May is lovely, the weather is mild.", role="assistant"),
    ]
    await produce(stack.bootstrap, first)
    working = f"/v1/sessions/{session}/working"

    def closed() -> bool:
        response = stack.get(working, tenant_id=TENANT, user_id=user)
        return response.status_code == 200 and response.json()["closed"]

    wait_for(closed, 30, "idle session closed", interval=0.5)

    def episode_of(event_ids: set[str]) -> dict[str, Any] | None:
        for m in stack.memories(TENANT, user, type="episode"):
            if set(m["source"]["event_ids"]) == event_ids:
                return m
        return None

    episode = wait_for(lambda: episode_of({t["event_id"] for t in first}), 60, "episode of the idle session")
    assert episode["source"]["session_id"] == session
    [end] = await read_session_ends(stack.bootstrap, session, 1)
    assert end["metadata"] == {"closed_by": "idle_timer"}

    # A turn after the close opens a fresh window, which closes itself in turn.
    later = turn(TENANT, user, session, 2, "We also want to visit Porto for two days by train.")
    await produce(stack.bootstrap, [later])
    wait_for(lambda: episode_of({later["event_id"]}), 60, "episode of the reopened session")
    ends = await read_session_ends(stack.bootstrap, session, 2)
    assert len({e["event_id"] for e in ends}) == 2
    assert stack.get(f"/v1/users/{user_path(user)}/memories", tenant_id=TENANT).status_code == 200


async def test_a_question_surfaced_three_times_is_deferred_not_surfaced_again_and_still_answerable(
    stack: Stack,
) -> None:
    user = f"asker-{uuid.uuid4().hex[:8]}"
    day1 = datetime.now(UTC) - timedelta(days=3)
    await produce(
        stack.bootstrap,
        [
            turn(TENANT, user, "q1", 0, "Which visa do I need for the Japan conference trip?", ts=day1),
            turn(TENANT, user, "q1", 1, "I'm not sure, it depends on your passport.", role="assistant", ts=day1),
            session_end(TENANT, user, "q1", ts=day1 + timedelta(seconds=5)),
        ],
    )

    def the_question() -> dict[str, Any] | None:
        found = stack.memories(TENANT, user, type="question")
        return found[0] if found else None

    asked = wait_for(the_question, 60, "the open question")
    query = "planning the Japan conference"
    for _ in range(3):  # each recall that surfaces it marks an access
        result = stack.recall(TENANT, user, query)
        assert [m["id"] for m in result["memories"] if m["surfaced"] == "open_question"] == [asked["id"]]
    wait_for(lambda: (q := the_question()) and q["access_count"] == 3, 60, "three surfacings counted", interval=0.5)
    wait_for(lambda: settled(stack, user), 60, "memories settled", interval=0.5)
    surfaced = the_question()  # each applied access mark is a version of its own
    assert surfaced is not None

    later = datetime.now(UTC) + timedelta(days=1)  # three days open: deferred for its surfacings, not its age
    assert "deferred=1" in maintain(stack, user, later)
    deferred = the_question()
    assert deferred is not None
    assert deferred["status"] == "active"
    assert deferred["version"] == surfaced["version"] + 1
    assert (deferred["question"]["state"], deferred["question"]["attempts"]) == ("deferred", 3)
    history = stack.get(f"/v1/users/{user_path(user)}/memories/{deferred['id']}/history", tenant_id=TENANT)
    assert [(m["id"], m["question"]["state"]) for m in history.json()["chain"]] == [(deferred["id"], "deferred")]

    again = maintain(stack, user, later)
    assert again.strip().endswith(": users=1"), again
    after = stack.recall(TENANT, user, query, record_access=False)
    assert not [m for m in after["memories"] if m["surfaced"]]
    assert "<open_questions>" not in after["prompt"]

    # A later statement that answers it still resolves the deferred question.
    await produce(
        stack.bootstrap, [turn(TENANT, user, "q2", 0, "Turns out the Japan conference visa is a short business visa.")]
    )
    done = wait_for(
        lambda: (q := the_question()) and q["question"]["state"] == "tentatively_resolved" and q,
        60,
        "the deferred question tentatively resolved",
    )
    assert done["version"] == deferred["version"] + 1
