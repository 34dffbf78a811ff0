from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from services.api.ranking import Candidate, Weights, access, pack, prompt_block, rank, recency
from services.core.textutil import count_tokens

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def cand(cid: str, text: str = "", sim: float = 0.5, days: float = 0, pinned: bool = False) -> Candidate:
    return Candidate(
        id=cid,
        type="exchange",
        text=text or f"memory text of {cid}",  # distinct: pack skips a memory whose words one taken holds
        similarity=sim,
        importance=0.5,
        access_count=0,
        observed_at=NOW - timedelta(days=days),
        entities=[],
        source={},
        pinned=pinned,
    )


def test_recency_halves_every_180_days() -> None:
    assert recency(NOW, NOW) == 1.0
    assert abs(recency(NOW - timedelta(days=180), NOW) - 0.5) < 1e-9


def test_recency_counts_from_the_later_of_observation_and_last_access() -> None:
    long_ago = NOW - timedelta(days=720)
    assert abs(recency(long_ago, NOW, NOW - timedelta(days=180)) - 0.5) < 1e-9
    # An access recorded before the observation (clock skew) does not age the memory.
    assert recency(NOW, NOW, long_ago) == 1.0
    assert recency(long_ago, NOW, None) == recency(long_ago, NOW)


def test_access_signal_grows_with_recalls_and_stays_bounded() -> None:
    values = [access(n) for n in (0, 1, 2, 10, 50, 10_000)]
    assert values[0] == 0.0
    assert values == sorted(values)
    assert values[1] < values[2] < values[3] < 1.0
    assert values[4] == values[5] == 1.0


def test_a_recently_recalled_memory_outranks_an_equally_similar_forgotten_one() -> None:
    old = cand("forgotten", sim=0.6, days=400)
    recalled = Candidate(**{**cand("recalled", sim=0.6, days=400).__dict__, "access_count": 3, "last_accessed_at": NOW})
    ranked = rank([old, recalled], "q", NOW, Weights())
    assert [c.id for c in ranked] == ["recalled", "forgotten"]
    assert ranked[0].signals["recency"] == 1.0
    assert ranked[0].signals["access"] == access(3)


def test_similar_and_recent_rank_first_and_pinned_rank_by_their_score() -> None:
    ranked = rank(
        [cand("old", sim=0.9, days=720), cand("best", sim=0.9), cand("weak", sim=0.1), cand("p", sim=0.5, pinned=True)],
        "q",
        NOW,
        Weights(),
    )
    assert [c.id for c in ranked] == ["best", "old", "p", "weak"]
    assert ranked[0].signals["similarity"] == 0.9


def test_a_pinned_memory_is_in_the_answer_at_its_place_in_the_ranking() -> None:
    ranked = [cand(f"hit{i}", sim=0.9 - i / 100) for i in range(5)] + [cand("profile", sim=0.1, pinned=True)]
    chosen, _ = pack(ranked, top_k=3, token_budget=1000)
    # Ranked sixth, it still takes one of three places, and is listed last, where its score puts it.
    assert [c.id for c in chosen] == ["hit0", "hit1", "profile"]
    # A budget it does not fit leaves it out: pinned means first in, not over the budget.
    big = cand("big profile", text="word " * 100, pinned=True)
    chosen, _ = pack([cand("hit"), big], top_k=3, token_budget=50)
    assert [c.id for c in chosen] == ["hit"]


def test_a_pinned_preference_stays_beside_the_exchange_of_its_turn() -> None:
    def from_turn(cid: str, type_: str, event: str, sim: float, pinned: bool = False) -> Candidate:
        return replace(cand(cid, sim=sim, pinned=pinned), type=type_, source={"event_ids": [event]})

    turn = from_turn("turn", "exchange", "e1", 0.9)
    pinned = from_turn("its preference", "preference", "e1", 0.5, pinned=True)
    unpinned = from_turn("its question", "question", "e1", 0.4)
    chosen, _ = pack([turn, pinned, unpinned], top_k=3, token_budget=1000)
    # What the user wants stays in the answer; an unpinned memory of the same turn still gives way.
    assert [c.id for c in chosen] == ["turn", "its preference"]


@given(
    sims=st.lists(st.tuples(st.floats(0, 1), st.booleans(), st.integers(1, 30)), min_size=0, max_size=25),
    top_k=st.integers(min_value=1, max_value=10),
    budget=st.integers(min_value=1, max_value=200),
)
def test_pack_keeps_rank_order_and_takes_every_pinned_memory_that_fits(
    sims: list[tuple[float, bool, int]], top_k: int, budget: int
) -> None:
    ranked = rank([cand(str(i), "w " * n, s, pinned=p) for i, (s, p, n) in enumerate(sims)], "q", NOW, Weights())
    chosen, _ = pack(ranked, top_k, budget)
    place = {c.id: i for i, c in enumerate(ranked)}
    assert [place[c.id] for c in chosen] == sorted(place[c.id] for c in chosen)
    # Pinned memories go in first, in rank order, while they fit: none is left out for an unpinned one.
    pinned, room, spent = [c for c in ranked if c.pinned], top_k, 0
    expected = []
    for c in pinned:
        if len(expected) < room and spent + count_tokens(c.text) + 3 <= budget:
            expected.append(c.id)
            spent += count_tokens(c.text) + 3
    assert [c.id for c in chosen if c.pinned] == expected


def test_packing_respects_budget_and_skips_what_does_not_fit() -> None:
    big = cand("big", text="word " * 100)
    small = cand("small", text="tiny")
    chosen, used = pack([big, small], top_k=10, token_budget=20)
    assert [c.id for c in chosen] == ["small"]
    assert used == count_tokens("tiny") + 3


def test_prompt_block_format() -> None:
    assert prompt_block([cand("a", text="User likes tea")]) == "<memory>\n[EXCHANGE] User likes tea\n</memory>"


@given(
    texts=st.lists(st.text(alphabet="ab .", min_size=1, max_size=80), min_size=0, max_size=30),
    top_k=st.integers(min_value=1, max_value=20),
    budget=st.integers(min_value=1, max_value=300),
)
def test_pack_never_exceeds_budget_or_top_k(texts: list[str], top_k: int, budget: int) -> None:
    chosen, used = pack([cand(str(i), text=t) for i, t in enumerate(texts)], top_k, budget)
    assert len(chosen) <= top_k
    assert used <= budget
    assert used == sum(count_tokens(c.text) + 3 for c in chosen)
    assert len({c.id for c in chosen}) == len(chosen)


def test_a_memory_taken_from_a_turn_the_answer_holds_is_left_out_for_something_new() -> None:
    def from_turns(cid: str, type_: str, *events: str) -> Candidate:
        return Candidate(**{**cand(cid).__dict__, "type": type_, "source": {"event_ids": list(events)}})

    ranked = [
        from_turns("turn", "exchange", "e1"),
        from_turns("its question", "question", "e1"),
        from_turns("its preference", "preference", "e1"),
        from_turns("an episode over it", "episode", "e1", "e2"),
        from_turns("a fact from another turn", "fact", "e3"),
        from_turns("the same turn again", "exchange", "e1"),
    ]
    chosen, _ = pack(ranked, top_k=10, token_budget=1000)
    assert [c.id for c in chosen] == ["turn", "an episode over it", "a fact from another turn", "the same turn again"]
    # A keyed fact from the turn stays: it is the current value, the turn may be an old one.
    chosen, _ = pack([ranked[0], from_turns("its fact", "fact", "e1")], top_k=10, token_budget=1000)
    assert [c.id for c in chosen] == ["turn", "its fact"]
    # Ranked above the turn, a memory from it stays: only what comes after the turn is redundant.
    chosen, _ = pack([ranked[1], ranked[0]], top_k=10, token_budget=1000)
    assert [c.id for c in chosen] == ["its question", "turn"]


def test_a_memory_an_earlier_one_quotes_word_for_word_is_left_out() -> None:
    episode = replace(cand("episode", "Trip to Oslo. user: Caroline: I booked the ferry to Oslo!"), type="episode")
    ranked = [
        episode,
        cand("quoted", "Caroline: I booked the ferry to Oslo."),  # punctuation and case do not matter
        cand("longer", "Caroline: I booked the ferry to Oslo for May."),  # says more: kept
        cand("part of a word", "Trip to Osl"),  # whole words only: kept
        cand("pinned", "I booked the ferry", pinned=True),  # pinned: always kept
    ]
    chosen, used = pack(ranked, top_k=10, token_budget=1000)
    assert [c.id for c in chosen] == ["episode", "longer", "part of a word", "pinned"]
    assert used == sum(count_tokens(c.text) + 3 for c in chosen)
    # Ranked above the episode, the exchange stays: the episode says more than it.
    chosen, _ = pack([ranked[1], episode], top_k=10, token_budget=1000)
    assert [c.id for c in chosen] == ["quoted", "episode"]


@given(st.lists(st.lists(st.sampled_from(["oslo", "ferry", "may", "trip"]), min_size=1, max_size=4), max_size=12))
def test_no_memory_taken_repeats_the_words_of_one_taken_before(texts: list[list[str]]) -> None:
    ranked = [cand(f"m{i}", " ".join(words)) for i, words in enumerate(texts)]
    chosen, _ = pack(ranked, top_k=20, token_budget=10_000)
    spaced = [f" {c.text} " for c in chosen]
    assert all(spaced[j] not in spaced[i] for i in range(len(spaced)) for j in range(i + 1, len(spaced)))
    # Every memory left out is held by one taken before it.
    for c in ranked:
        if c not in chosen:
            before = [t for t in chosen if ranked.index(t) < ranked.index(c)]
            assert any(f" {c.text} " in f" {t.text} " for t in before)


def test_rank_scores_copies_and_leaves_the_candidates_it_was_given_as_they_were() -> None:
    given = [cand("a", sim=0.9, days=3), replace(cand("b", sim=0.2), entities=["Oslo"], access_count=4)]
    before = [replace(c) for c in given]
    ranked = rank(given, "trip to Oslo", NOW, Weights())
    assert given == before  # not scored in place
    for c in ranked:
        original = next(g for g in given if g.id == c.id)
        assert c == replace(original, signals=c.signals, score=c.score)  # every other field as it was
        assert c.score > 0
        assert set(c.signals) == {"similarity", "recency", "importance", "access", "entity"}
    assert [c.id for c in ranked] == ["a", "b"]
    assert ranked[1].signals["entity"] == 1.0
    assert ranked[1].signals["access"] > 0
