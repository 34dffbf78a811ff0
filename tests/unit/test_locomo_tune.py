"""The tuning tool's second-look steps and its per-part figures."""

from datetime import UTC, datetime

from services.api.ranking import Candidate
from services.stores.vector import Sparse
from tests.bench.locomo_tune import by_part, expansion, parts, spread_sessions

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def _c(id_: str, score: float, session: str | None, *, pinned: bool = False) -> Candidate:
    source = {"session_id": session} if session else {}
    return Candidate(id_, "exchange", id_, 1.0, 0.5, 0, NOW, [], source, pinned=pinned, score=score)


def test_spread_lets_a_second_session_in_before_a_third_turn_of_the_first() -> None:
    ranked = [_c("a1", 0.9, "a"), _c("a2", 0.85, "a"), _c("a3", 0.8, "a"), _c("b1", 0.78, "b")]
    assert [c.id for c in spread_sessions(ranked, 0.05, 10)] == ["a1", "a2", "b1", "a3"]
    assert [c.id for c in spread_sessions(ranked, 0.1, 10)] == ["a1", "b1", "a2", "a3"]


def test_spread_keeps_pinned_first_sessionless_unpenalised_and_the_tail_in_order() -> None:
    ranked = [_c("p", 0.1, "a", pinned=True), _c("a1", 0.9, "a"), _c("x", 0.5, None), _c("a2", 0.6, "a")]
    assert [c.id for c in spread_sessions(ranked, 0.2, 10)] == ["p", "a1", "x", "a2"]
    assert [c.id for c in spread_sessions(ranked, 0.2, 1)] == ["p", "a1", "x", "a2"]
    assert spread_sessions(ranked, 0.0, 10) is ranked


def test_expansion_adds_terms_shared_by_hits_at_the_given_weight() -> None:
    query = Sparse([1, 2], [1.0, 1.0])
    hits = [Sparse([1, 7, 8], [1, 1, 1]), Sparse([7, 8, 9], [1, 1, 1]), Sparse([7, 9], [1, 1])]
    wide = expansion(query, hits, terms=1, weight=0.3)
    assert wide.indices == [1, 2, 7]
    assert wide.values == [1.0, 1.0, 0.3]
    assert expansion(query, hits, terms=5, weight=0.3).indices == [1, 2, 7, 8, 9]
    assert expansion(query, hits[:1], terms=5, weight=0.3) == query  # no term in two hits
    assert expansion(query, hits, terms=5, weight=0.0) == query


def test_parts_split_the_conversations_and_by_part_scores_each() -> None:
    samples = [{"sample_id": s} for s in ("c0", "c1", "c2", "c3")]
    halves = parts(samples, 3)
    assert halves == {"0-2": {"c0", "c1", "c2"}, "3-3": {"c3"}}
    answers = {("c0", 0): (1, {"D1:1"}), ("c3", 0): (4, {"D1:2"})}
    lines = [
        {"sample_id": "c0", "qa_index": 0, "retrieved": [{"source_dia_ids": ["D1:1"]}]},
        {"sample_id": "c3", "qa_index": 0, "retrieved": [{"source_dia_ids": ["D9:9"]}]},
    ]
    shown = by_part(lines, answers, halves)
    assert "0-2: R@5 100.0 R@10 100.0 multi@10 100.0" in shown
    assert "3-3: R@5 0.0 R@10 0.0 multi@10 -" in shown
    lines[0]["retrieved"][0]["text"] = "The weather was fine."
    backing = {("c0", "D1:1"): {"paint", "lake"}, ("c3", "D1:2"): {"run"}}
    backed = by_part(lines, answers, halves, backing)
    assert "0-2: R@5 100.0 R@10 100.0 multi@10 100.0 (text-backed R@10 0.0 multi@10 0.0)" in backed
