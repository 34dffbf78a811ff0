"""Maintenance decisions: decay, prune, clusters, themes, topics, a whole pass and its re-run."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from faust.types import TP
from hypothesis import given
from hypothesis import strategies as st

from agents.maintenance.idle import idle_session_end
from agents.maintenance.logic import (
    Effect,
    Rules,
    clusters,
    common_theme,
    decay,
    defer,
    mean_vector,
    plan_user,
    prune,
    topics,
)
from agents.maintenance.timers import is_leader
from schemas import ChangeOp, MemoryRecord, MemoryStatus, MemoryType, Provenance
from schemas.memory import Question, QuestionState
from services.stores.postgres.maintenance import IdleSession
from services.textutil import stable_id

NOW = datetime(2027, 1, 1, tzinfo=UTC)
RULES = Rules(
    decay_rate=0.05,
    decay_after=timedelta(days=7),
    prune_below=0.1,
    prune_after=timedelta(days=30),
    pattern_min=5,
    semantic_window=timedelta(days=90),
)


def record(
    name: str,
    *,
    importance: float = 0.5,
    age: timedelta = timedelta(days=365),
    type_: MemoryType = MemoryType.EPISODE,
    session: str = "s",
    category: str | None = None,
    entities: tuple[str, ...] = (),
    accessed: datetime | None = None,
) -> MemoryRecord:
    at = NOW - age
    return MemoryRecord(
        id=stable_id("t", "u", name),
        tenant_id="t",
        user_id="u",
        type=type_,
        text=f"text of {name}",
        content_hash=name,
        category=category,
        importance=importance,
        confidence=0.7,
        status=MemoryStatus.ACTIVE,
        observed_at=at,
        created_at=at,
        updated_at=at,
        source=Provenance(session_id=session, event_ids=[f"{name}-e1", f"{name}-e2"]),
        entities=list(entities),
        last_accessed_at=accessed,
    )


def direction(i: int, noise: float = 0.0) -> list[float]:
    """A unit vector near axis 0 (noise small) or along axis i."""
    v = np.zeros(8)
    v[0] = 1.0
    v[i % 8] += noise
    return [float(x) for x in v / np.linalg.norm(v)]


def applied(records: list[MemoryRecord], effects: list[Effect]) -> list[MemoryRecord]:
    """The user's active rows after a pass's writes."""
    rows = {r.id: r for r in records}
    rows.update({e.record.id: e.record for e in effects})
    return [r for r in rows.values() if r.status is MemoryStatus.ACTIVE]


@given(st.floats(0, 1), st.floats(0, 1))
def test_decay_never_goes_below_zero_and_applies_once_per_pass(importance: float, rate: float) -> None:
    rules = Rules(rate, RULES.decay_after, 0.1, RULES.prune_after, 5, RULES.semantic_window)
    decayed = decay(record("m", importance=importance), NOW, rules)
    if decayed is not None:
        assert 0.0 <= decayed.importance < importance
        assert decayed.importance == max(0.0, round(importance - rate, 6))
        assert decay(decayed, NOW, rules) is None  # same pass moment: nothing more
        # A later pass decays again unless there is nothing (left) to take.
        follow = decay(decayed, NOW + timedelta(hours=6), rules)
        assert (
            follow is not None or decayed.importance == 0.0 or round(decayed.importance - rate, 6) >= decayed.importance
        )


def test_decay_spares_recently_accessed_or_young_memories() -> None:
    assert decay(record("m", accessed=NOW - timedelta(days=3)), NOW, RULES) is None
    assert decay(record("m", age=timedelta(days=2)), NOW, RULES) is None
    old = decay(record("m", accessed=NOW - timedelta(days=8)), NOW, RULES)
    assert old is not None
    assert old.importance == 0.45


def test_prune_needs_both_low_importance_and_a_month_unaccessed() -> None:
    assert prune(record("m", importance=0.09, accessed=NOW - timedelta(days=29)), NOW, RULES) is None
    assert prune(record("m", importance=0.1), NOW, RULES) is None
    pruned = prune(record("m", importance=0.09), NOW, RULES)
    assert pruned is not None
    assert pruned.status is MemoryStatus.PRUNED


def test_clusters_link_chains_and_leave_outliers_alone() -> None:
    a, b = [1.0, 0.0], [0.8, 0.6]  # cosine 0.8
    c = [0.28, 0.96]  # cosine 0.8 with b, 0.28 with a: joined through b
    outlier = [-1.0, 0.0]
    assert clusters([a, b, c, outlier], 0.75) == [[0, 1, 2], [3]]
    assert clusters([a, c], 0.75) == [[0], [1]]
    assert clusters([], 0.75) == []


@given(st.lists(st.lists(st.floats(-1, 1), min_size=3, max_size=3).filter(lambda v: any(abs(x) > 1e-3 for x in v))))
def test_clusters_partition_the_inputs(vectors: list[list[float]]) -> None:
    groups = clusters(vectors, 0.75)
    assert sorted(i for g in groups for i in g) == list(range(len(vectors)))


def test_mean_vector_is_unit_length() -> None:
    mean = mean_vector([direction(1, 0.3), direction(2, 0.3)])
    assert float(np.linalg.norm(mean)) == pytest.approx(1.0)
    assert mean[1] == pytest.approx(mean[2])


def test_common_theme_is_what_most_members_share() -> None:
    members = [
        record("a", category="marathon, training, gels", entities=("Berlin",)),
        record("b", category="marathon, shoes", entities=("Berlin",)),
        record("c", category="marathon, training"),
    ]
    assert common_theme(members) == ["marathon", "berlin", "training"]
    assert common_theme([record("x", category="a"), record("y", category="b")]) == ["a", "b"]


def test_a_topic_needs_two_sessions_within_the_window() -> None:
    one_session = [record("a", session="s1", category="chess"), record("b", session="s1", category="chess")]
    assert topics(one_session, RULES.semantic_window) == {}
    far_apart = [
        record("a", session="s1", category="chess", age=timedelta(days=300)),
        record("b", session="s2", category="chess", age=timedelta(days=100)),
    ]
    assert topics(far_apart, RULES.semantic_window) == {}
    close = [*far_apart, record("c", session="s3", category="chess", age=timedelta(days=50))]
    assert [r.id for r in topics(close, RULES.semantic_window)["chess"]] == sorted([close[1].id, close[2].id])


def similar_episodes(n: int) -> tuple[list[MemoryRecord], dict[str, list[float] | None]]:
    episodes = [
        record(f"ep{i}", session=f"s{i}", category="marathon, training", age=timedelta(days=3)) for i in range(n)
    ]
    return episodes, {e.id: direction(i + 1, 0.3) for i, e in enumerate(episodes)}


def test_a_pass_compresses_similar_episodes_into_a_pattern_and_synthesizes_topics() -> None:
    episodes, vectors = similar_episodes(5)
    stale = record("exchange", type_=MemoryType.EXCHANGE, importance=0.12)
    effects, counts = plan_user([*episodes, stale], {**vectors, stale.id: direction(7)}, set(), NOW, RULES)
    by_id = {e.record.id: e for e in effects}
    assert counts["patterns"] == 1
    assert counts["compressed"] == 5
    assert counts["semantic"] == 2  # "marathon" and "training"
    assert counts["decayed"] == 1
    assert counts["pruned"] == 1
    assert by_id[stale.id].op is ChangeOp.DELETED
    assert "prune" in by_id[stale.id].reason
    assert by_id[stale.id].record.version == 2
    [pattern] = [e for e in effects if e.record.type is MemoryType.PATTERN]
    assert pattern.op is ChangeOp.ADDED
    assert pattern.vector is not None
    assert "marathon" in pattern.record.text
    assert set(pattern.record.source.event_ids) == {x for e in episodes for x in e.source.event_ids}
    for episode in episodes:
        effect = by_id[episode.id]
        assert effect.record.compressed
        assert effect.vector is not None  # stays indexed, flagged: recall skips it unless include_compressed
        assert effect.record.version == 2


def test_a_second_pass_with_the_same_now_changes_nothing() -> None:
    episodes, vectors = similar_episodes(6)
    others = [record(f"x{i}", type_=MemoryType.PREFERENCE, importance=0.05 * i) for i in range(5)]
    rows = [*episodes, *others]
    vectors.update({o.id: direction(2) for o in others})
    effects, _ = plan_user(rows, vectors, set(), NOW, RULES)
    assert effects
    taken = {e.record.id for e in effects if e.record.type in (MemoryType.PATTERN, MemoryType.SEMANTIC)}
    vectors.update({e.record.id: e.vector for e in effects if e.vector is not None})
    again, counts = plan_user(applied(rows, effects), vectors, taken, NOW, RULES)
    assert again == []
    assert not counts


def test_a_topic_that_comes_back_gets_a_new_version_not_a_duplicate() -> None:
    recent = timedelta(days=10)
    first = [
        record("a", session="s1", category="chess", age=recent),
        record("b", session="s2", category="chess", age=recent),
    ]
    vectors: dict[str, list[float] | None] = {r.id: direction(3) for r in first}
    effects, _ = plan_user(first, vectors, set(), NOW, RULES)
    [semantic] = [e.record for e in effects if e.record.type is MemoryType.SEMANTIC]
    later = NOW + timedelta(days=1)
    back = record("c", session="s3", category="chess", age=timedelta(days=-1))
    vectors[back.id] = direction(3)
    rows = [*applied(first, effects), back]
    effects2, _ = plan_user(rows, vectors, {semantic.id}, later, RULES)
    by_op = {e.op: e.record for e in effects2 if e.record.type is MemoryType.SEMANTIC}
    assert by_op[ChangeOp.SUPERSEDED].id == semantic.id
    assert by_op[ChangeOp.SUPERSEDED].superseded_by == by_op[ChangeOp.ADDED].id
    assert by_op[ChangeOp.SUPERSEDED].version == semantic.version + 1
    assert "3 sessions" in by_op[ChangeOp.ADDED].text


def question(
    *,
    surfaced: int = 0,
    age: timedelta = timedelta(days=2),
    state: QuestionState = QuestionState.OPEN,
    status: MemoryStatus = MemoryStatus.ACTIVE,
) -> MemoryRecord:
    q = record("q", type_=MemoryType.QUESTION, age=age, accessed=NOW - timedelta(days=1) if surfaced else None)
    return q.model_copy(
        update={
            "access_count": surfaced,
            "status": status,
            "question": Question(state=state, related=["japan", "visa"]),
        }
    )


def test_an_open_question_surfaced_often_enough_is_deferred_with_its_surfacings_as_attempts() -> None:
    assert defer(question(surfaced=2), NOW, RULES) is None
    deferred = defer(question(surfaced=3), NOW, RULES)
    assert deferred is not None
    q, reason = deferred
    assert q.question is not None
    assert (q.question.state, q.question.attempts, q.question.related) == (QuestionState.DEFERRED, 3, ["japan", "visa"])
    assert q.status is MemoryStatus.ACTIVE  # a state, not a status: still listed, still indexed
    assert q.updated_at == NOW
    assert reason == "deferred: surfaced 3 times without an answer (limit 3)"


def test_an_open_question_open_longer_than_the_limit_is_deferred() -> None:
    assert defer(question(age=timedelta(days=30)), NOW, RULES) is None  # "longer than": not at the limit
    deferred = defer(question(age=timedelta(days=31), surfaced=1), NOW, RULES)
    assert deferred is not None
    q, reason = deferred
    assert q.question is not None
    assert (q.question.state, q.question.attempts) == (QuestionState.DEFERRED, 1)
    assert reason == "deferred: open for 31 days without an answer (limit 30 days)"
    # As of the pass's `now`, not the clock: the same question a month earlier is young.
    assert defer(question(age=timedelta(days=31)), NOW - timedelta(days=20), RULES) is None


def test_only_an_active_open_question_is_deferred() -> None:
    old = timedelta(days=90)
    assert defer(question(surfaced=5, age=old, state=QuestionState.DEFERRED), NOW, RULES) is None
    assert defer(question(surfaced=5, age=old, state=QuestionState.TENTATIVELY_RESOLVED), NOW, RULES) is None
    assert defer(question(surfaced=5, age=old, status=MemoryStatus.DELETED), NOW, RULES) is None
    assert defer(record("e", age=old), NOW, RULES) is None  # not a question
    strict = Rules(**{**RULES.__dict__, "question_max_surfaced": 10, "question_defer_after": timedelta(days=100)})
    assert defer(question(surfaced=5, age=old), NOW, strict) is None


def test_a_pass_defers_a_question_once_and_says_why() -> None:
    last_surfaced = NOW - timedelta(days=8)
    asked = question(surfaced=4, age=timedelta(days=10)).model_copy(update={"last_accessed_at": last_surfaced})
    effects, counts = plan_user([asked], {asked.id: direction(1)}, set(), NOW, RULES)
    [effect] = effects
    assert counts["deferred"] == 1
    assert effect.op is ChangeOp.UPDATED
    assert "deferred: surfaced 4 times" in effect.reason
    assert "decay" in effect.reason  # unaccessed for 8 days: decayed in the same pass, one version
    assert effect.record.version == asked.version + 1
    assert effect.vector == direction(1)
    again, counts = plan_user(applied([asked], effects), {asked.id: direction(1)}, set(), NOW, RULES)
    assert (again, counts) == ([], Counter())


def test_the_idle_close_is_a_marked_session_end_with_a_stable_id() -> None:
    quiet = IdleSession("t", "u", "s", NOW - timedelta(hours=1))
    event = idle_session_end(quiet, NOW)
    assert event.type == "session_end"
    assert event.metadata == {"closed_by": "idle_timer"}
    assert event.ts == NOW
    assert idle_session_end(quiet, NOW + timedelta(seconds=5)).event_id == event.event_id
    reopened = IdleSession("t", "u", "s", NOW)
    assert idle_session_end(reopened, NOW).event_id != event.event_id


def test_the_leader_is_the_owner_of_partition_zero_of_chat_turns() -> None:
    def app(*owned: tuple[str, int]) -> Any:
        assignment = {TP(topic, partition) for topic, partition in owned}
        return SimpleNamespace(consumer=SimpleNamespace(assignment=lambda: assignment))

    assert is_leader(app(("chat.turns", 0), ("memory.changes", 3)))
    assert not is_leader(app(("chat.turns", 1), ("memory.changes", 0)))
    assert not is_leader(app())
