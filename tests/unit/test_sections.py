"""The sectioned prompt: procedural first, semantic within 60 % of what is left, episodic in the rest."""

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from schemas.memory import MemoryLayer, MemoryType
from services.api.ranking import Candidate, cost, layer_of, pack_sections, prompt_sections

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def cand(cid: str, type_: str, words: int = 1) -> Candidate:
    return Candidate(
        id=cid,
        type=type_,
        text=" ".join([f"w{cid}"] * words),
        similarity=0.5,
        importance=0.5,
        access_count=0,
        observed_at=NOW,
        entities=[],
        source={},
    )


def test_every_type_has_its_layer() -> None:
    assert layer_of("preference") is MemoryLayer.PROCEDURAL
    assert {layer_of(t) for t in ("fact", "semantic", "pattern")} == {MemoryLayer.SEMANTIC}
    assert {layer_of(t) for t in ("episode", "exchange", "question")} == {MemoryLayer.EPISODIC}
    assert layer_of("not-a-type") is MemoryLayer.EPISODIC
    assert {layer_of(t.value) for t in MemoryType} == {
        MemoryLayer.PROCEDURAL,
        MemoryLayer.SEMANTIC,
        MemoryLayer.EPISODIC,
    }


def test_layers_are_packed_in_order_whatever_the_rank() -> None:
    ranked = [cand("e", "episode"), cand("f", "fact"), cand("p", "preference"), cand("x", "exchange")]
    chosen, used = pack_sections(ranked, top_k=10, token_budget=1000)
    assert [c.id for c in chosen] == ["p", "f", "e", "x"]
    assert used == sum(cost(c) for c in chosen)


def test_semantic_takes_at_most_sixty_percent_of_what_procedural_left() -> None:
    pref = cand("p", "preference", words=5)
    facts = [cand(f"f{i}", "fact", words=5) for i in range(20)]
    episodes = [cand(f"e{i}", "episode", words=5) for i in range(20)]
    budget = 200
    chosen, used = pack_sections([*facts, *episodes, pref], top_k=100, token_budget=budget)
    left = budget - cost(pref)
    semantic = sum(cost(c) for c in chosen if c.layer is MemoryLayer.SEMANTIC)
    episodic = sum(cost(c) for c in chosen if c.layer is MemoryLayer.EPISODIC)
    assert chosen[0] is pref
    assert 0 < semantic <= int(left * 0.6)
    assert semantic + cost(facts[0]) > int(left * 0.6)  # it took all it could
    assert 0 < episodic <= budget - cost(pref) - semantic
    assert used <= budget


def test_episodic_gets_what_semantic_did_not_use() -> None:
    episodes = [cand(f"e{i}", "episode", words=5) for i in range(10)]
    chosen, _ = pack_sections([cand("f", "fact"), *episodes], top_k=100, token_budget=10 * cost(episodes[0]) + 10)
    assert len([c for c in chosen if c.layer is MemoryLayer.EPISODIC]) == 10


def test_prompt_sections_titles_non_empty_layers_in_order() -> None:
    prompt = prompt_sections([cand("p", "preference"), cand("e", "exchange")])
    assert prompt == "USER PROFILE:\n[PREFERENCE] wp\n\nRECENT SESSIONS:\n[EXCHANGE] we"
    assert prompt_sections([]) == ""


@given(
    types=st.lists(st.sampled_from([t.value for t in MemoryType]), max_size=40),
    words=st.integers(min_value=1, max_value=30),
    top_k=st.integers(min_value=1, max_value=30),
    budget=st.integers(min_value=1, max_value=400),
)
def test_sections_never_exceed_budget_or_top_k_and_keep_layer_order(
    types: list[str], words: int, top_k: int, budget: int
) -> None:
    chosen, used = pack_sections([cand(str(i), t, words) for i, t in enumerate(types)], top_k, budget)
    order = list(MemoryLayer).index
    assert len(chosen) <= top_k
    assert used == sum(cost(c) for c in chosen) <= budget
    assert [order(c.layer) for c in chosen] == sorted(order(c.layer) for c in chosen)
    assert len({c.id for c in chosen}) == len(chosen)
