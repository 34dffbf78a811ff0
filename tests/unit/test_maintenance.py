"""Maintenance decisions: decay, prune, clusters, themes, topics, provenance, a whole pass and its re-run."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from faust.types import TP
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.maintenance.idle import idle_session_end
from agents.maintenance.rules.common import SNIPPET_CHARS, mean_vector
from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.decay import decay, last_seen, prune
from agents.maintenance.rules.patterns import clusters, common_theme, link_threshold
from agents.maintenance.rules.plan import Effect, plan_user
from agents.maintenance.rules.questions import defer
from agents.maintenance.rules.synthesized import covered, union_provenance
from agents.maintenance.rules.topics import topics
from agents.maintenance.timers import is_leader, leader_topic
from agents.provenance import MAX_SOURCES
from schemas import ChangeOp, MemoryRecord, MemoryStatus, MemoryType, Provenance
from schemas.memory import Question, QuestionState
from services.core.config import Settings
from services.core.textutil import stable_id
from services.stores.postgres.maintenance import IdleSession

NOW = datetime(2027, 1, 1, tzinfo=UTC)
RULES = Rules(
    decay_half_life=timedelta(days=180),
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
    ingested: datetime | None = None,
) -> MemoryRecord:
    """A memory observed `age` before NOW; `ingested` (wall-clock creation) defaults to the observation."""
    at = NOW - age
    written = ingested or at
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
        created_at=written,
        updated_at=written,
        source=Provenance(
            session_id=session,
            event_ids=[f"{name}-e1", f"{name}-e2"],
            metadata=[{"dia_id": f"{name}:1"}, {"dia_id": f"{name}:2"}],
        ),
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


HALF_LIFE = RULES.decay_half_life


@given(st.floats(0, 1), st.floats(1, 1000))
def test_decay_halves_importance_per_half_life_unseen_and_applies_once_per_pass(importance: float, days: float) -> None:
    rules = Rules(timedelta(days=days), RULES.decay_after, 0.1, RULES.prune_after, 5, RULES.semantic_window)
    m = record("m", importance=importance, age=RULES.decay_after + timedelta(days=days))
    decayed = decay(m, NOW, rules)
    if decayed is not None:
        assert decayed.importance == round(importance / 2, 6)  # exactly one half-life past the grace
        assert decay(decayed, NOW, rules) is None  # same pass moment: nothing more
    else:
        assert round(importance / 2, 6) >= importance  # nothing (left) to take


@given(st.floats(0.01, 1), st.lists(st.integers(1, 30 * 24), min_size=1, max_size=12))
def test_how_often_passes_run_does_not_change_how_fast_memory_fades(importance: float, gaps: list[int]) -> None:
    """Passes every 6 hours or once a month: after the same time unseen, the same importance."""
    m = record("m", importance=importance, age=RULES.decay_after)
    now = NOW
    for hours in gaps:
        now += timedelta(hours=hours)
        m = decay(m, now, RULES) or m
    once = decay(record("m", importance=importance, age=RULES.decay_after), now, RULES)
    assert once is not None
    assert m.importance == pytest.approx(once.importance, abs=1e-5 * len(gaps))


def test_decay_spares_recently_accessed_or_young_memories() -> None:
    assert decay(record("m", accessed=NOW - timedelta(days=3)), NOW, RULES) is None
    assert decay(record("m", age=timedelta(days=2)), NOW, RULES) is None
    old = decay(record("m", accessed=NOW - RULES.decay_after - HALF_LIFE), NOW, RULES)
    assert old is not None
    assert old.importance == 0.25


def test_a_year_unseen_fades_a_memory_to_a_fifth_not_to_nothing() -> None:
    """What a pass every 6 hours at 0.05 a pass did in two days (0.5 to under 0.1, then pruned) takes years."""
    faded = decay(record("m", importance=0.5, type_=MemoryType.EXCHANGE), NOW, RULES)  # observed a year ago
    assert faded is not None
    assert faded.importance == pytest.approx(0.5 * 0.5 ** (358 / 180), abs=1e-6)
    assert prune(faded, NOW, RULES) is None
    assert 0.12 < faded.importance < 0.13


def test_prune_needs_both_low_importance_and_a_month_unaccessed() -> None:
    exchange = MemoryType.EXCHANGE
    assert prune(record("m", importance=0.09, type_=exchange, accessed=NOW - timedelta(days=29)), NOW, RULES) is None
    assert prune(record("m", importance=0.1, type_=exchange), NOW, RULES) is None
    pruned = prune(record("m", importance=0.09, type_=MemoryType.EXCHANGE), NOW, RULES)
    assert pruned is not None
    assert pruned.status is MemoryStatus.PRUNED


def test_only_exchanges_and_questions_are_pruned_for_disuse() -> None:
    """What the user told about themself, and their history's episodes, patterns and topics, stay."""
    for kind in (MemoryType.EXCHANGE, MemoryType.QUESTION):
        assert prune(record("m", importance=0.05, type_=kind), NOW, RULES) is not None
    for kind in (MemoryType.FACT, MemoryType.PREFERENCE, MemoryType.EPISODE, MemoryType.PATTERN, MemoryType.SEMANTIC):
        faded = record("m", importance=0.0, type_=kind, age=timedelta(days=3650))
        assert prune(faded, NOW, RULES) is None
        assert decay(record("m", type_=kind), NOW, RULES) is not None  # it still ranks lower with time


def test_age_is_measured_in_the_data_s_own_timeline_not_from_ingestion() -> None:
    # Observed a year before the pass, ingested (created, updated) after it: a replay evaluated in its past.
    replayed = record("m", ingested=NOW + timedelta(days=30))
    assert last_seen(replayed) == NOW - timedelta(days=365)
    decayed = decay(replayed, NOW, RULES)
    assert decayed is not None
    assert decayed.importance == round(0.5 * 0.5 ** (358 / 180), 6)
    replayed_exchange = record("m", importance=0.05, type_=MemoryType.EXCHANGE, ingested=NOW + timedelta(days=30))
    assert prune(replayed_exchange, NOW, RULES) is not None
    # A recall since the observation is a sighting: the later of the two counts.
    seen = record("m", accessed=NOW - timedelta(days=2))
    assert last_seen(seen) == NOW - timedelta(days=2)
    assert decay(seen, NOW, RULES) is None
    assert last_seen(record("m", age=timedelta(days=3), accessed=NOW - timedelta(days=9))) == NOW - timedelta(days=3)
    # As of a moment before the observation, a memory is not old at all.
    assert decay(record("m", age=timedelta(days=-10)), NOW, RULES) is None


def test_history_imported_today_starts_at_its_full_importance() -> None:
    """Two years of chats imported yesterday: faded only for the day memstream has had them, then pruned
    only when a year and more without a recall has taken them under the floor."""
    imported = record(
        "m", importance=0.5, type_=MemoryType.EXCHANGE, age=timedelta(days=730), ingested=NOW - timedelta(days=1)
    )
    decayed = decay(imported, NOW, RULES)
    assert decayed is not None
    assert decayed.importance == round(0.5 * 0.5 ** (1 / 180), 6)
    assert prune(decayed, NOW, RULES) is None
    later = decay(decayed, NOW + timedelta(days=360), RULES)
    assert later is not None
    assert later.importance == pytest.approx(0.5 * 0.5 ** (361 / 180), abs=1e-5)
    assert prune(later, NOW + timedelta(days=360), RULES) is None  # 0.125: still above the floor
    gone = decay(later, NOW + timedelta(days=420), RULES)
    assert gone is not None
    assert prune(gone, NOW + timedelta(days=420), RULES) is not None


def test_clusters_do_not_chain_and_leave_outliers_alone() -> None:
    a, b = [1.0, 0.0], [0.8, 0.6]  # cosine 0.8
    c = [0.3, 0.954]  # cosine 0.81 with b, 0.3 with a: single link would chain a-b-c
    outlier = [-1.0, 0.0]
    assert clusters([a, b, c, outlier], 0.75) == [[0], [1, 2], [3]]
    assert clusters([a, c], 0.75) == [[0], [1]]
    assert clusters([a, a, b], 0.75) == [[0, 1, 2]]
    assert clusters([], 0.75) == []


def cosine(u: list[float], v: list[float]) -> float:
    return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))


nonzero = st.lists(st.floats(-1, 1), min_size=3, max_size=3).filter(lambda v: float(np.linalg.norm(v)) > 1e-3)


def mean_cosine(vectors: list[list[float]], g: list[int], h: list[int]) -> float:
    """The mean cosine of the pairs across g and h (within g when h is g)."""
    pairs = [(i, j) for i in g for j in h if i != j]
    return sum(cosine(vectors[i], vectors[j]) for i, j in pairs) / len(pairs)


@given(st.lists(nonzero, max_size=14), st.floats(0.5, 0.95))
def test_average_link_clusters_partition_are_close_on_average_and_maximal(
    vectors: list[list[float]], threshold: float
) -> None:
    groups = clusters(vectors, threshold)
    assert sorted(i for g in groups for i in g) == list(range(len(vectors)))
    for g in groups:
        assert len(g) == 1 or mean_cosine(vectors, g, g) >= threshold - 1e-5
    # Maximal: no two clusters could merge (the mean cosine across them is below the threshold).
    for k, g in enumerate(groups):
        for h in groups[k + 1 :]:
            assert mean_cosine(vectors, g, h) < threshold + 1e-5


def test_one_unlike_pair_does_not_split_a_theme() -> None:
    # Four steps of one plan, 20° apart: neighbours close (0.94), the first and last worded apart (0.5).
    plan = [[math.cos(math.radians(a)), math.sin(math.radians(a))] for a in (0, 20, 40, 60)]
    assert cosine(plan[0], plan[3]) == pytest.approx(0.5)
    assert clusters(plan, 0.7) == [[0, 1, 2, 3]]  # complete link at 0.7 made [[0, 1], [2, 3]]
    assert clusters(plan, 0.75) == [[0, 1], [2, 3]]


def pairwise(cosines: list[float], dim: int = 64, seed: int = 0) -> list[list[float]]:
    """Unit vectors with about the given mean cosine to each other: a shared direction plus noise."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=dim)
    out = []
    for c in cosines:
        v = math.sqrt(c) * shared / np.linalg.norm(shared) + math.sqrt(1 - c) * rng.normal(size=dim) / math.sqrt(dim)
        out.append([float(x) for x in v])
    return out


def test_the_link_threshold_is_what_stands_out_for_the_user() -> None:
    # Six episodes of one theme and nothing else (the user planning a trip): no background of their own,
    # the prior of unrelated episodes says their mutual similarity stands out.
    trip = pairwise([0.55] * 6)
    assert clusters(trip, link_threshold(trip, RULES)) == [list(range(6))]
    # Sixty episodes of two friends chatting: everything is about as alike as the trip was, and the
    # threshold rises above it; a whole history is never one pattern.
    chat = pairwise([0.45] * 60, seed=1)
    threshold = link_threshold(chat, RULES)
    assert threshold > mean_cosine(chat, list(range(60)), list(range(60))) + 0.05
    assert max(len(g) for g in clusters(chat, threshold)) < 10
    assert link_threshold([], RULES) == link_threshold(trip[:1], RULES)  # no pairs: the prior alone
    assert link_threshold(trip[:1], Rules(**{**RULES.__dict__, "pattern_prior_pairs": 0.0})) == 0.0


@given(st.lists(nonzero, max_size=14), st.floats(0.5, 0.95), st.data())
def test_dropping_whole_clusters_leaves_the_other_clusters_as_they_were(
    vectors: list[list[float]], threshold: float, data: st.DataObject
) -> None:
    groups = clusters(vectors, threshold)
    dropped = data.draw(st.sets(st.sampled_from(range(len(groups))))) if groups else set()
    kept = sorted(i for k, g in enumerate(groups) if k not in dropped for i in g)
    again = clusters([vectors[i] for i in kept], threshold)
    assert sorted(sorted(kept[i] for i in g) for g in again) == [g for k, g in enumerate(groups) if k not in dropped]


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
    assert common_theme(members) == ["marathon", "training"]  # entities are not terms
    assert common_theme([record("x", category="apples"), record("y", category="pears")]) == ["apples", "pears"]


def test_a_topic_needs_three_episodes_from_two_sessions_within_the_window() -> None:
    one_session = [record(n, session="s1", category="chess") for n in "abc"]
    assert topics(one_session, RULES) == []
    two = [record("a", session="s1", category="chess"), record("b", session="s2", category="chess")]
    assert topics(two, RULES) == []
    far_apart = [
        record("a", session="s1", category="chess", age=timedelta(days=300)),
        record("b", session="s2", category="chess", age=timedelta(days=100)),
        record("c", session="s2", category="chess", age=timedelta(days=90)),
    ]
    assert topics(far_apart, RULES) == []
    close = [*far_apart, record("d", session="s3", category="chess", age=timedelta(days=50))]
    [topic] = topics(close, RULES)
    assert (topic.term, topic.terms) == ("chess", ("chess",))
    assert [r.id for r in topic.members] == sorted(r.id for r in close[1:])


def test_names_and_stopwords_are_not_topics() -> None:
    # "Caroline" is an entity of two episodes and speaks in them: a name, however often the topics carry it.
    episodes = [
        record(f"e{i}", session=f"s{i}", category="caroline, painting, the", entities=("Caroline",) if i < 2 else ())
        for i in range(4)
    ]
    episodes = [e.model_copy(update={"text": f"user: Caroline: I painted again. ({e.text})"}) for e in episodes]
    assert [t.term for t in topics(episodes, RULES)] == ["painting"]
    thanked = [e.model_copy(update={"text": f"user: Thanks, Caroline! ({e.text})"}) for e in episodes]
    assert [t.term for t in topics(thanked, RULES)] == ["painting"]
    once = [e.model_copy(update={"entities": ["Painting"] if i == 0 else []}) for i, e in enumerate(episodes)]
    assert [t.terms for t in topics(once, RULES)] == [("caroline", "painting")]  # one capital is not a name


def test_a_name_that_is_the_subject_is_a_topic() -> None:
    """Six sessions planning a trip to Japan: "Japan" is an entity of every episode, and no one's name."""
    episodes = [
        record(f"e{i}", session=f"s{i}", category=f"japan, {word}", entities=("Japan",))
        for i, word in enumerate(["rail", "ryokan", "visa", "budget", "kyoto", "packing"])
    ]
    assert [t.term for t in topics(episodes, RULES)] == ["japan"]
    # An itinerary's bold label ("**Japan:** …", plain in the episode) is no speaker.
    labelled = [episodes[0].model_copy(update={"text": "assistant: Japan: two weeks by rail."}), *episodes[1:]]
    assert [t.term for t in topics(labelled, RULES)] == ["japan"]


def test_topics_largely_sharing_their_episodes_fold_into_the_best_supported_one() -> None:
    chess = [record(f"c{i}", session=f"s{i}", category="chess, openings") for i in range(4)]
    also = [record(f"d{i}", session=f"s{i}", category="chess") for i in range(2)]
    tennis = [record(f"t{i}", session=f"s{i}", category="tennis, chess") for i in range(3)]
    found = topics([*chess, *also, *tennis], RULES)
    # chess: 9 episodes; openings shares 4 of them (Jaccard 4/9 < 0.5): its own topic; tennis 3/9 too.
    assert [(t.term, t.terms, len(t.members)) for t in found] == [
        ("chess", ("chess",), 9),
        ("openings", ("openings",), 4),
        ("tennis", ("tennis",), 3),
    ]
    merged = topics([*chess, *tennis], RULES)  # openings now shares 4 of 7 with chess: folded in
    assert [(t.term, t.terms) for t in merged] == [("chess", ("chess", "openings")), ("tennis", ("tennis",))]


def test_a_topic_counts_every_episode_that_mentions_it_not_only_those_it_labels() -> None:
    """Six sessions about sourdough: three give it as a label, the others other words, all six say it."""
    said = [
        ("starter, water, bottled", "I want to bake sourdough bread. Should I use bottled water for the starter?"),
        ("starter, sourdough, smells", "My sourdough starter smells like nail polish remover."),
        ("loaf, flat, starter", "My first sourdough loaf came out flat. How do I keep a starter alive?"),
        ("crumb, flour, open", "I want a more open crumb in my sourdough."),
        ("oven, sourdough, dutch", "Do I need a dutch oven to bake sourdough?"),
        ("discard, sourdough, pizza", "Can I make sourdough pizza dough with my discard?"),
    ]
    episodes = [
        record(f"e{i}", session=f"s{i}", category=category).model_copy(update={"text": text})
        for i, (category, text) in enumerate(said)
    ]
    [topic] = topics(episodes, RULES)
    # starter's three sessions are half of sourdough's six: folded into it.
    assert (topic.term, topic.terms, len(topic.members)) == ("sourdough", ("sourdough", "starter"), 6)
    among_others = [episodes[1], episodes[3], episodes[5]] + [
        record(f"t{i}", session=f"t{i}", category="taxes, freelancer").model_copy(update={"text": "Taxes due?"})
        for i in range(2)
    ]
    # Labelled by two of the three sessions that talk about it, the third labelled crumb, flour, open.
    found = [(t.term, len(t.members)) for t in topics(among_others, RULES)]
    assert found == [("sourdough", 3)]
    once = [e.model_copy(update={"category": "bread"}) if e.id == episodes[5].id else e for e in among_others]
    assert topics(once, RULES) == [], "a subject one episode labels is not yet a topic"
    unlabelled = [e.model_copy(update={"category": "baking"}) for e in episodes]
    assert [t.terms for t in topics(unlabelled, RULES)] == [("baking",)], "mentioned, never a label: no topic"


def test_at_most_the_cap_of_topics_best_supported_first() -> None:
    episodes = [
        record(f"{word}{i}", session=f"s{i}", category=word)
        for n, word in enumerate(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"])
        for i in range(3 + n % 3)
    ]
    found = topics(episodes, RULES)
    assert len(found) == RULES.semantic_max_topics
    assert [t.term for t in found] == ["charlie", "foxtrot", "bravo", "echo", "alpha"]  # sessions, then the term
    assert [t.term for t in topics(episodes, Rules(**{**RULES.__dict__, "semantic_max_topics": 2}))] == [
        "charlie",
        "foxtrot",
    ]


def test_synthesized_provenance_keeps_the_members_turn_metadata_bounded_with_the_synthesis_last() -> None:
    few = [record(f"m{i}", age=timedelta(days=10 - i)) for i in range(3)]
    source = union_provenance(few, {"synthesized": "pattern", "memory_ids": sorted(r.id for r in few)})
    assert source.event_ids == [e for r in few for e in r.source.event_ids]
    assert [m.get("dia_id") for m in source.metadata] == ["m0:1", "m0:2", "m1:1", "m1:2", "m2:1", "m2:2", None]
    assert covered(record("x").model_copy(update={"source": source})) == {r.id for r in few}
    many = [record(f"m{i}", age=timedelta(days=100 - i)) for i in range(40)]
    bounded = union_provenance(many, {"synthesized": "pattern", "memory_ids": sorted(r.id for r in many)})
    assert len(bounded.event_ids) == 80  # every event
    assert len(bounded.metadata) == MAX_SOURCES  # the newest turns' metadata, as the consolidator bounds it
    assert bounded.metadata[-2] == {"dia_id": "m39:2"}
    assert bounded.metadata[-1]["synthesized"] == "pattern"


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
    assert counts["semantic"] == 1  # "marathon" and "training" carried by the same episodes: one topic
    assert counts["decayed"] == 1
    assert counts["pruned"] == 1
    assert by_id[stale.id].op is ChangeOp.DELETED
    assert "prune" in by_id[stale.id].reason
    assert by_id[stale.id].record.version == 2
    [pattern] = [e for e in effects if e.record.type is MemoryType.PATTERN]
    assert pattern.op is ChangeOp.ADDED
    assert pattern.vector is not None
    assert pattern.record.text.startswith("Recurring theme across 5 episodes in 5 sessions")
    assert "marathon, training" in pattern.record.text
    assert "Typically: text of ep" in pattern.record.text
    assert set(pattern.record.source.event_ids) == {x for e in episodes for x in e.source.event_ids}
    # Per-turn metadata travels with the union (a LoCoMo `dia_id` is how a pattern's turns are found).
    dia_ids = {m["dia_id"] for m in pattern.record.source.metadata if "dia_id" in m}
    assert dia_ids == {m["dia_id"] for e in episodes for m in e.source.metadata}
    assert covered(pattern.record) == {e.id for e in episodes}
    [semantic] = [e.record for e in effects if e.record.type is MemoryType.SEMANTIC]
    assert (semantic.key_name, semantic.category) == ("marathon", "marathon, training")
    assert semantic.text.startswith("Recurring topic: marathon, training. Discussed in 5 sessions")
    for episode in episodes:
        effect = by_id[episode.id]
        assert effect.record.compressed
        assert effect.vector is not None  # stays indexed, flagged: recall skips it unless include_compressed
        assert effect.record.version == 2


def test_a_theme_the_user_keeps_coming_back_to_grows_one_pattern() -> None:
    """Maintenance runs daily: the sessions after a pattern formed join it (a new version), not a second one."""
    first, vectors = similar_episodes(6)
    effects, _ = plan_user(first, vectors, set(), NOW, RULES)
    rows = applied(first, effects)
    vectors.update({e.record.id: e.vector for e in effects if e.vector is not None})
    taken = {e.record.id for e in effects if e.record.type in (MemoryType.PATTERN, MemoryType.SEMANTIC)}
    [old] = [r for r in rows if r.type is MemoryType.PATTERN]
    later = [record(f"ep{i}", session=f"s{i}", category="marathon, training", age=timedelta(days=1)) for i in (6, 7)]
    vectors.update({e.id: direction(i + 1, 0.3) for i, e in zip((6, 7), later, strict=True)})
    effects, counts = plan_user([*rows, *later], vectors, taken, NOW + timedelta(days=1), RULES)
    assert (counts["patterns"], counts["pattern_superseded"], counts["compressed"]) == (1, 1, 2)
    by_id = {e.record.id: e.record for e in effects}
    assert by_id[old.id].status is MemoryStatus.SUPERSEDED
    [grown] = [r for r in by_id.values() if r.type is MemoryType.PATTERN and r.status is MemoryStatus.ACTIVE]
    assert by_id[old.id].superseded_by == grown.id
    assert covered(grown) == {e.id for e in [*first, *later]}
    assert grown.text.startswith("Recurring theme across 8 episodes in 8 sessions")
    assert all(by_id[e.id].compressed for e in later)


def test_patterns_and_topics_quote_an_episode_without_its_header_and_between_words() -> None:
    """Their own first sentence names the theme and the dates; the episode's header said them again."""
    episodes, vectors = similar_episodes(5)
    long_run = "user: Ran " + "very " * 60 + "far."
    dated = [
        e.model_copy(
            update={
                "text": f"Conversation on 2026-05-0{i + 1} about marathon, training. {long_run if i == 4 else f'user: Ran {i + 5} km.'}"
            }
        )
        for i, e in enumerate(episodes)
    ]
    effects, _ = plan_user(dated, vectors, set(), NOW, RULES)
    [pattern] = [e.record for e in effects if e.record.type is MemoryType.PATTERN]
    [topic] = [e.record for e in effects if e.record.type is MemoryType.SEMANTIC]
    assert pattern.text.split("Typically: ", 1)[1].startswith("user: Ran ")
    assert "Conversation on" not in pattern.text
    recently = topic.text.split("Most recently: ", 1)[1]
    assert "Conversation on" not in topic.text
    assert recently.startswith("user: Ran very very")
    assert recently.endswith("very …")  # cut between words, at most SNIPPET_CHARS
    assert len(recently) <= SNIPPET_CHARS + 2


def test_two_patterns_stay_two_when_an_episode_could_join_either() -> None:
    """An existing pattern takes new members; it never swallows another pattern."""

    def unit(*pairs: tuple[int, float]) -> list[float]:
        v = np.zeros(8)
        for axis, x in pairs:
            v[axis] += x
        return [float(x) for x in v / np.linalg.norm(v)]

    chess = [record(f"c{i}", session=f"c{i}", category="chess", age=timedelta(days=3)) for i in range(5)]
    tennis = [record(f"t{i}", session=f"t{i}", category="tennis", age=timedelta(days=3)) for i in range(5)]
    vectors: dict[str, list[float] | None] = {e.id: unit((0, 1.0), (1 + i % 3, 0.3)) for i, e in enumerate(chess)}
    vectors.update({e.id: unit((4, 1.0), (5 + i % 3, 0.3)) for i, e in enumerate(tennis)})
    effects, _ = plan_user([*chess, *tennis], vectors, set(), NOW, RULES)
    rows = applied([*chess, *tennis], effects)
    assert len([r for r in rows if r.type is MemoryType.PATTERN]) == 2
    vectors.update({e.record.id: e.vector for e in effects if e.vector is not None})
    taken = {e.record.id for e in effects if e.record.type in (MemoryType.PATTERN, MemoryType.SEMANTIC)}
    both = record("both", session="b", category="chess, tennis", age=timedelta(days=1))
    vectors[both.id] = unit((0, 1.0), (4, 1.0))
    again, _ = plan_user([*rows, both], vectors, taken, NOW + timedelta(days=1), RULES)
    after = applied([*rows, both], again)
    patterns = [r for r in after if r.type is MemoryType.PATTERN]
    assert len(patterns) == 2
    assert sorted(len(covered(p)) for p in patterns) in ([5, 5], [5, 6])


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


episode_specs = st.tuples(
    st.integers(0, 2),  # which of three directions the vector leans to
    st.integers(1, 7),  # its own small twist
    st.sampled_from(["chess", "chess, openings", "tennis", "tennis, serve", "cooking"]),
    st.sampled_from(["s1", "s2", "s3"]),
    st.sampled_from([1, 10, 40, 120, 400]),  # days observed before NOW
    st.sampled_from([0.05, 0.12, 0.5]),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(episode_specs, max_size=16), st.booleans())
def test_re_planning_after_applying_a_plan_yields_no_effects(specs: list[tuple[Any, ...]], with_question: bool) -> None:
    rows: list[MemoryRecord] = []
    vectors: dict[str, list[float] | None] = {}
    for n, (lean, twist, category, session, days, importance) in enumerate(specs):
        r = record(f"e{n}", session=session, category=category, age=timedelta(days=days), importance=importance)
        v = np.zeros(8)
        v[lean], v[3 + twist % 5] = 1.0, 0.25 * (twist % 3)
        rows.append(r)
        vectors[r.id] = [float(x) for x in v]
    if with_question:
        q = question(surfaced=3)
        rows.append(q)
        vectors[q.id] = direction(1)
    effects, _ = plan_user(rows, vectors, set(), NOW, RULES)
    taken = {e.record.id for e in effects if e.record.type in (MemoryType.PATTERN, MemoryType.SEMANTIC)}
    vectors.update({e.record.id: e.vector for e in effects if e.vector is not None})
    again, counts = plan_user(applied(rows, effects), vectors, taken, NOW, RULES)
    assert (again, counts) == ([], Counter())


def test_a_topic_that_comes_back_gets_a_new_version_not_a_duplicate() -> None:
    recent = timedelta(days=10)
    first = [
        record("a", session="s1", category="chess", age=recent),
        record("b", session="s2", category="chess", age=recent),
        record("a2", session="s1", category="chess", age=recent),
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
    # A generation's window reads the archive: its leader owns the archive's partition 0.
    archive = leader_topic(Settings(generation="v2"))
    assert leader_topic(Settings()) == "chat.turns"
    assert is_leader(app(("memory.archive", 0)), archive)
    assert not is_leader(app(("chat.turns", 0), ("memory.archive", 1)), archive)
