"""Score fusion of the recall legs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.models import RecallRequest
from services.api.recall import _from_hit, fused_candidates, with_profile
from services.stores.fusion import (
    OWN_ONLY,
    FusionWeights,
    RecallFusion,
    fuse_legs,
    normalised,
    weighted,
)
from services.stores.postgres.memory_reads import LiveHit
from services.stores.vector import Hit, Legs
from tests.index_probe import payload_traits, with_payloads

W = FusionWeights(dense=0.4, sparse=0.6)


def hits(*pairs: tuple[str, float]) -> list[Hit]:
    return [Hit(i, s, {"text": i}) for i, s in pairs]


def fuse(dense: list[Hit], sparse: list[Hit], weights: FusionWeights, limit: int) -> list[Hit]:
    """The own-text legs alone, the context and session weights at zero: the two-leg fusion."""
    legs = Legs(dense=dense, sparse=sparse)
    return fuse_legs(legs, RecallFusion(legs=weights, context=0.0, session=0.0), payload_traits(legs), limit)


def test_an_exact_match_keeps_its_margin_where_rank_fusion_would_flatten_it() -> None:
    dense = hits(("exact", 0.99), *((f"m{i}", 0.55 - i * 0.01) for i in range(9)))
    sparse = hits(("exact", 31.0), *((f"m{i}", 4.0 - i * 0.1) for i in range(9)))
    fused = fuse(dense, sparse, W, 10)
    assert fused[0].id == "exact"
    assert fused[0].score == 1.0
    # The runner-up is far behind: RRF would have given it 98 % of the best score.
    assert fused[1].score < 0.6


def test_a_memory_in_one_leg_only_gets_nothing_from_the_other() -> None:
    fused = {h.id: h.score for h in fuse(hits(("a", 0.9), ("b", 0.5)), hits(("c", 2.0), ("b", 1.0)), W, 10)}
    assert fused == {"a": 0.4, "b": 0.0, "c": 0.6}


def test_equal_scores_all_count_as_best_and_an_empty_leg_is_no_leg() -> None:
    assert normalised(hits(("a", 0.3), ("b", 0.3))) == {"a": 1.0, "b": 1.0}
    assert [h.id for h in fuse(hits(("b", 0.3), ("a", 0.3)), [], W, 10)] == ["a", "b"]


@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(-5, 50)), max_size=8, unique_by=lambda p: p[0]),
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 50)), max_size=8, unique_by=lambda p: p[0]),
    st.integers(1, 10),
)
def test_fused_scores_are_bounded_ordered_and_cover_both_legs(
    dense: list[tuple[str, float]], sparse: list[tuple[str, float]], limit: int
) -> None:
    fused = fuse(hits(*dense), hits(*sparse), W, limit)
    ids = {i for i, _ in dense} | {i for i, _ in sparse}
    assert len(fused) == min(limit, len(ids))
    assert all(-1e-9 <= h.score <= 1.0 + 1e-9 for h in fused)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)


# --- the four legs and the session cue (services.stores.fusion.fuse_legs) ---

EXCHANGE = {"type": "exchange", "has_context": True}


def leg(*pairs: tuple[str, float], payload: dict[str, object] | None = None) -> list[Hit]:
    return [Hit(i, s, {"text": i, **(payload or EXCHANGE)}) for i, s in pairs]


def test_the_turn_after_the_question_is_found_through_its_context() -> None:
    """'yes, in May' shares no word with the query; its context (the question before it) does."""
    legs = Legs(
        dense=leg(("chat", 0.6), ("answer", 0.3)),
        sparse=leg(("chat", 2.0), ("answer", 0.1)),
        dense_ctx=leg(("answer", 0.8), ("chat", 0.4)),
        sparse_ctx=leg(("answer", 5.0), ("chat", 1.0)),
    )
    assert [h.id for h in fuse_legs(legs, OWN_ONLY, payload_traits(legs), 10)] == ["chat", "answer"]
    fused = fuse_legs(legs, RecallFusion(context=1.0, session=0.0), payload_traits(legs), 10)
    assert [h.id for h in fused] == ["answer", "chat"]


def test_a_memory_without_context_legs_counts_its_own_text_for_them() -> None:
    episode = {"type": "episode", "has_context": False, "source": {"session_id": "s1"}}
    legs = Legs(
        dense=[*leg(("turn", 0.9)), *leg(("summary", 0.9), payload=episode)],
        dense_ctx=leg(("turn", 0.2), ("other", 0.1)),
    )
    scores = {h.id: h.score for h in fuse_legs(legs, RecallFusion(session=0.0), payload_traits(legs), 10)}
    # Both match their own text equally; the turn's context is the worse one, the summary has none.
    assert scores["summary"] == pytest.approx(0.8)
    assert scores["turn"] == pytest.approx(0.4 + 0.4)
    assert scores["other"] == pytest.approx(0.0)


def test_a_turn_of_the_conversation_the_query_is_about_outranks_an_equally_close_one_elsewhere() -> None:
    s1, s2 = ({**EXCHANGE, "source": {"session_id": s}} for s in ("s1", "s2"))
    legs = Legs(
        dense=[
            *leg(("best-in-s1", 1.0), payload=s1),
            *leg(("in-s1", 0.5), payload=s1),
            *leg(("in-s2", 0.5), ("best-in-s2", 0.75), payload=s2),
            *leg(("worst", 0.0), payload={**EXCHANGE, "source": {"session_id": "s3"}}),
        ]
    )
    scores = {h.id: h.score for h in fuse_legs(legs, RecallFusion(context=0.0, session=0.5), payload_traits(legs), 10)}
    # Session scores: s1's best 0.4 (1 of the best session), s2's best 0.3 (0.75 of it), s3's best 0.
    assert scores["in-s1"] == pytest.approx(0.2 + 0.5)
    assert scores["in-s2"] == pytest.approx(0.2 + 0.5 * 0.75)
    assert scores["best-in-s1"] == pytest.approx(0.4 + 0.5)
    assert scores["worst"] == pytest.approx(0.0)


LEG = st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 50)), max_size=8, unique_by=lambda p: p[0])
PAYLOADS = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["exchange", "episode", "fact"]),
        "has_context": st.booleans(),
        "source": st.fixed_dictionaries({"session_id": st.sampled_from(["s1", "s2"])}),
    }
)


def _legs(draw: st.DrawFn) -> Legs:
    payloads = {i: draw(PAYLOADS) for i in "abcdefgh"}

    def hits_of(pairs: list[tuple[str, float]]) -> list[Hit]:
        return [Hit(i, s, payloads[i]) for i, s in pairs]

    return Legs(*(hits_of(draw(LEG)) for _ in range(4)))


legs_strategy = st.composite(_legs)


@given(legs_strategy(), st.integers(1, 10))
def test_with_the_context_and_session_weights_at_zero_it_is_the_two_leg_fusion(legs: Legs, limit: int) -> None:
    """The weighted sum of the own legs, best first, ties by id."""
    scores = weighted(legs.dense, legs.sparse, W)
    expected = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    own = Legs(dense=legs.dense, sparse=legs.sparse)
    new = fuse_legs(own, OWN_ONLY, payload_traits(own), limit)
    assert [(h.id, h.score) for h in new] == [(i, pytest.approx(score)) for i, score in expected]


@given(legs_strategy(), st.floats(0, 3), st.floats(0, 1))
def test_a_memory_that_tops_every_leg_comes_first_whatever_the_weights(legs: Legs, ctx: float, ses: float) -> None:
    """Adding the context legs or the session cue never drops what matches best on every leg."""
    top = Hit("z", 100.0, {"type": "exchange", "has_context": True, "source": {"session_id": "s9"}})
    legs = Legs(*([top, *hits] for hits in (legs.dense, legs.sparse, legs.dense_ctx, legs.sparse_ctx)))
    fused = fuse_legs(legs, RecallFusion(context=ctx, session=ses), payload_traits(legs), 10)
    assert fused[0].id == "z"
    assert fused[0].score == pytest.approx(1 + ctx + ses)


@given(legs_strategy(), st.floats(0, 3), st.floats(0, 1), st.integers(1, 10))
def test_every_hit_of_any_leg_can_come_back_and_totals_stay_bounded(
    legs: Legs, ctx: float, ses: float, limit: int
) -> None:
    fused = fuse_legs(legs, RecallFusion(context=ctx, session=ses), payload_traits(legs), limit)
    ids = {h.id for leg_ in (legs.dense, legs.sparse, legs.dense_ctx, legs.sparse_ctx) for h in leg_}
    assert len(fused) == min(limit, len(ids))
    assert all(-1e-9 <= h.score <= 1 + ctx + ses + 1e-9 for h in fused)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)


@given(legs_strategy(), st.sets(st.sampled_from("abcdefgh")))
def test_legs_keep_their_order_when_restricted_and_name_each_point_once(legs: Legs, keep: set[str]) -> None:
    ids = legs.ids()
    assert len(ids) == len(set(ids)) == len({h.id for leg_ in legs.all() for h in leg_})
    kept = legs.restricted(keep)
    for before, after in zip(legs.all(), kept.all(), strict=True):
        assert after == [h for h in before if h.id in keep]
    assert set(kept.ids()) == set(ids) & keep


def test_legs_without_payloads_take_them_from_a_lookup_and_drop_what_it_lacks() -> None:
    legs = Legs(dense=[Hit("a", 0.9), Hit("b", 0.5)], sparse_ctx=[Hit("b", 2.0), Hit("c", 1.0)])
    assert all(h.payload == {} for leg_ in legs.all() for h in leg_)
    filled = with_payloads(legs, {"b": {"text": "b"}, "c": {"text": "c"}})
    assert filled.dense == [Hit("b", 0.5, {"text": "b"})]
    assert filled.sparse_ctx == [Hit("b", 2.0, {"text": "b"}), Hit("c", 1.0, {"text": "c"})]


# --- recall's candidates from live hits (services.api.recall.fused_candidates) ---


def _live(i: str, session: str = "s1", *, compressed: bool = False) -> LiveHit:
    return LiveHit(
        id=i,
        type="exchange",
        text=f"text of {i}",
        importance=0.5,
        observed_at=datetime(2026, 1, 1, tzinfo=UTC),
        entities=[],
        source={"session_id": session, "event_ids": [], "metadata": []},
        compressed=compressed,
        has_context=False,
        access_count=0,
        last_accessed_at=None,
    )


def test_a_hit_postgres_no_longer_holds_takes_no_place_and_the_best_live_hit_is_similarity_1() -> None:
    legs = Legs(dense=[Hit("stale", 0.99), Hit("a", 0.8), Hit("b", 0.4)], sparse=[Hit("stale", 9.0), Hit("b", 3.0)])
    live = {"a": _live("a"), "b": _live("b")}
    req = RecallRequest(tenant_id="t", user_id="u", query="q")
    candidates = fused_candidates(legs, live, OWN_ONLY, req, 10)
    assert [c.id for c in candidates] == ["b", "a"]  # over the live hits: b tops BM25, a tops dense
    assert candidates[0].similarity == 1.0
    assert candidates[0].text == "text of b"  # what the hit shows is the row's


def test_compressed_hits_leave_default_recall_and_come_back_when_asked_for() -> None:
    legs = Legs(dense=[Hit("folded", 0.9), Hit("a", 0.5)])
    live = {"folded": _live("folded", compressed=True), "a": _live("a")}
    plain = RecallRequest(tenant_id="t", user_id="u", query="q")
    asked = RecallRequest(tenant_id="t", user_id="u", query="q", include_compressed=True)
    assert [c.id for c in fused_candidates(legs, live, OWN_ONLY, plain, 10)] == ["a"]
    assert [c.id for c in fused_candidates(legs, live, OWN_ONLY, asked, 10)] == ["folded", "a"]


def test_a_profile_memory_the_index_also_found_is_one_pinned_candidate_at_its_better_similarity() -> None:
    legs = Legs(dense=[Hit("fact", 0.9), Hit("a", 0.45)], sparse=[Hit("fact", 5.0)])
    live = {"fact": _live("fact"), "a": _live("a")}
    hits = fused_candidates(legs, live, OWN_ONLY, RecallRequest(tenant_id="t", user_id="u", query="q"), 10)
    close, other = _from_hit(_live("fact"), 0.6, pinned=True), _from_hit(_live("pref"), 0.7, pinned=True)
    merged = with_profile([close, other], hits)
    assert [(c.id, c.pinned) for c in merged] == [("fact", True), ("pref", True), ("a", False)]
    # The index's fused score (1.0, the best hit) beats its cosine; one only in the profile keeps its cosine.
    assert [c.similarity for c in merged[:2]] == [1.0, 0.7]
