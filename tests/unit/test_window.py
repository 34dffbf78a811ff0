import itertools

from hypothesis import given
from hypothesis import strategies as st

from agents.window.logic import WindowLimits, append_turn, preceding, trim, window_tokens
from schemas import TurnEvent
from tests.factories import turn_event


def turn(i: int, words: int = 5) -> TurnEvent:
    return turn_event(i, " ".join(["word"] * words))


def test_under_limits_nothing_is_evicted() -> None:
    update = trim([turn(i) for i in range(5)], WindowLimits(max_tokens=1000, max_turns=20, keep_last=3))
    assert [t.event_id for t in update.window] == ["e0", "e1", "e2", "e3", "e4"]
    assert update.evicted == []


def test_turn_cap_evicts_oldest_but_keeps_first() -> None:
    update = trim([turn(i) for i in range(25)], WindowLimits(max_tokens=10_000, max_turns=20, keep_last=3))
    assert len(update.window) == 20
    assert update.window[0].event_id == "e0"
    assert [t.event_id for t in update.evicted] == ["e1", "e2", "e3", "e4", "e5"]


def test_token_budget_evicts_until_it_fits() -> None:
    update = trim([turn(i, words=10) for i in range(10)], WindowLimits(max_tokens=45, max_turns=20, keep_last=3))
    assert window_tokens(update.window) <= 45
    assert [t.event_id for t in update.window] == ["e0", "e7", "e8", "e9"]


def test_first_and_last_three_survive_even_over_budget() -> None:
    update = trim([turn(i, words=100) for i in range(6)], WindowLimits(max_tokens=10, max_turns=2, keep_last=3))
    assert [t.event_id for t in update.window] == ["e0", "e3", "e4", "e5"]
    assert [t.event_id for t in update.evicted] == ["e1", "e2"]


def test_a_window_over_its_limit_is_trimmed_to_half_in_one_run() -> None:
    """One chunk of turns leaves at once, then the window grows again: not one evicted turn per new turn."""
    limits = WindowLimits(max_tokens=10_000, max_turns=20, keep_last=3, trim_to=0.5)
    update = trim([turn(i) for i in range(21)], limits)
    assert [t.event_id for t in update.window] == ["e0", *(f"e{i}" for i in range(12, 21))]
    assert [t.event_id for t in update.evicted] == [f"e{i}" for i in range(1, 12)]
    window, evictions = update.window, []
    for i in range(21, 32):
        step = append_turn(window, turn(i), limits)
        window, evictions = step.window, [*evictions, len(step.evicted)]
    assert evictions == [0] * 10 + [11]  # the window reached 21 turns again, and only then


def test_a_token_budget_trims_to_half_of_it() -> None:
    limits = WindowLimits(max_tokens=100, max_turns=50, keep_last=1, trim_to=0.5)
    update = trim([turn(i, words=10) for i in range(11)], limits)
    assert window_tokens(update.window) <= 50
    assert [t.event_id for t in update.window] == ["e0", "e7", "e8", "e9", "e10"]


def test_redelivered_turn_changes_nothing() -> None:
    limits = WindowLimits(max_tokens=1000, max_turns=20, keep_last=3)
    window = [turn(0), turn(1)]
    update = append_turn(window, turn(1), limits)
    assert update.duplicate
    assert update.window == window
    assert update.evicted == []


def test_out_of_order_turn_is_placed_by_index() -> None:
    limits = WindowLimits(max_tokens=1000, max_turns=20, keep_last=3)
    update = append_turn([turn(0), turn(2)], turn(1), limits)
    assert [t.turn_index for t in update.window] == [0, 1, 2]


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=40),
    max_tokens=st.integers(min_value=1, max_value=500),
    max_turns=st.integers(min_value=1, max_value=25),
    keep_last=st.integers(min_value=0, max_value=5),
    trim_to=st.sampled_from([0.25, 0.5, 0.75, 1.0]),
)
def test_trim_invariants(sizes: list[int], max_tokens: int, max_turns: int, keep_last: int, trim_to: float) -> None:
    turns = [turn(i, words=n) for i, n in enumerate(sizes)]
    limits = WindowLimits(max_tokens, max_turns, keep_last, trim_to)
    update = trim(turns, limits)
    if len(turns) <= max_turns and window_tokens(turns) <= max_tokens:
        assert update.evicted == []  # within the limits nothing leaves, however low trim_to is
    kept_ids = [t.event_id for t in update.window]
    # Nothing lost, nothing duplicated, order preserved.
    assert sorted(kept_ids + [t.event_id for t in update.evicted], key=lambda e: int(e[1:])) == [
        t.event_id for t in turns
    ]
    assert kept_ids == sorted(kept_ids, key=lambda e: int(e[1:]))
    assert update.window[0].event_id == "e0"
    tail = [t.event_id for t in turns[-keep_last:]] if keep_last else []
    assert all(e in kept_ids for e in tail)
    # Either within the trimmed limits (if anything left), or nothing evictable is left.
    low_turns, low_tokens = max(1, int(max_turns * trim_to)), int(max_tokens * trim_to)
    within = len(update.window) <= low_turns and window_tokens(update.window) <= low_tokens
    assert not update.evicted or within or len(update.window) <= 1 + keep_last
    assert len(update.window) <= max_turns or len(update.window) <= 1 + keep_last


@given(st.lists(st.integers(0, 4_000), min_size=1, max_size=40), st.integers(2_000, 40_000))
def test_chunks_split_under_the_message_limit_keep_every_turn_in_order(sizes: list[int], limit: int) -> None:
    from agents.window.logic import split_by_size
    from schemas import EvictedChunk, codec

    turns = [turn_event(i, "字" * n) for i, n in enumerate(sizes)]
    parts = split_by_size(turns, limit)
    assert [t.event_id for part in parts for t in part] == [t.event_id for t in turns]
    for part in parts:
        chunk = EvictedChunk(tenant_id="t", user_id="u", session_id="s", reason="trimmed", turns=part, cause=["c"])
        assert len(part) == 1 or len(codec.dumps(chunk)) <= limit


def test_the_turns_before_a_new_one_are_its_context_oldest_first() -> None:
    window = [turn(0), turn(1), turn(2), turn(3)]
    assert [t.event_id for t in preceding(window, turn(4))] == ["e2", "e3"]
    assert [t.event_id for t in preceding(window, turn(1))] == ["e0"]  # a late turn: only what came before it
    assert preceding([], turn(0)) == []  # a session's first turn (or one after session_end) has none
    assert preceding(window, turn(4), n=0) == []


@given(st.permutations(range(8)), st.integers(0, 7))
def test_the_context_depends_on_the_window_not_on_arrival_order(order: list[int], new: int) -> None:
    window = [turn(i) for i in order if i != new]
    expected = [f"e{i}" for i in range(new)][-2:]
    assert [t.event_id for t in preceding(window, turn(new))] == expected


@given(
    max_turns=st.integers(min_value=1, max_value=200),
    max_tokens=st.integers(min_value=1, max_value=50_000),
    jitter=st.floats(min_value=0.0, max_value=0.9),
    session=st.text(min_size=1, max_size=12),
)
def test_a_sessions_limits_are_its_own_and_never_above_the_configured(
    max_turns: int, max_tokens: int, jitter: float, session: str
) -> None:
    limits = WindowLimits(max_tokens, max_turns, keep_last=3, trim_to=0.5, jitter=jitter)
    own = limits.for_session("t1", "u1", session)
    assert own == limits.for_session("t1", "u1", session)  # a replay trims where the first run did
    assert 1 <= own.max_turns <= max_turns
    assert 1 <= own.max_tokens <= max_tokens
    assert own.max_turns >= round(max_turns * (1 - jitter))
    assert own.max_tokens >= round(max_tokens * (1 - jitter))
    assert (own.keep_last, own.trim_to, own.jitter) == (3, 0.5, 0.0)
    # A trim takes as many turns as at the configured limits: sessions trim as often, only later or earlier.
    if own.targets()[1] > 1:
        assert own.max_turns - own.targets()[1] == limits.max_turns - limits.targets()[1]


def test_sessions_started_together_do_not_all_trim_on_the_same_turn() -> None:
    limits = WindowLimits(max_tokens=12_000, max_turns=20, keep_last=3, trim_to=0.5, jitter=0.25)
    unjittered = WindowLimits(max_tokens=12_000, max_turns=20, keep_last=3, trim_to=0.5)
    first_trim: dict[str, int] = {}
    for session in ["plain", *(f"s{i}" for i in range(50))]:
        own = unjittered if session == "plain" else limits.for_session("t1", "u1", session)
        window: list[TurnEvent] = []
        trims: list[tuple[int, int]] = []
        for i in range(60):
            update = append_turn(window, turn(i), own)
            window = update.window
            if update.evicted:
                trims.append((i, len(update.evicted)))
        if session == "plain":
            plain = trims
            continue
        first_trim[session] = trims[0][0]
        # Every trim after the first comes as many turns later and evicts as many as without jitter.
        n = min(len(trims), len(plain))
        assert [k for _, k in trims][:n] == [k for _, k in plain][:n]
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(trims)]
        assert gaps[: n - 1] == [b - a for (a, _), (b, _) in itertools.pairwise(plain)][: n - 1]
    assert set(first_trim) == {f"s{i}" for i in range(50)}  # every session still trims within the limit
    assert min(first_trim.values()) >= 15
    assert max(first_trim.values()) <= 20
    assert len(set(first_trim.values())) >= 4  # spread over turns, not one burst


def test_no_jitter_is_the_configured_limits_for_every_session() -> None:
    limits = WindowLimits(max_tokens=12_000, max_turns=20, keep_last=3, trim_to=0.5)
    assert limits.for_session("t1", "u1", "s1") is limits
