"""Score fusion of the recall legs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.stores.fusion import FusionWeights, fuse, normalised
from services.stores.vector import Hit

W = FusionWeights(dense=0.4, sparse=0.6)


def hits(*pairs: tuple[str, float]) -> list[Hit]:
    return [Hit(i, s, {"text": i}) for i, s in pairs]


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
