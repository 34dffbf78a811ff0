from datetime import UTC, datetime

import pytest

from agents.consolidator.decide import Action, Neighbours, decide
from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.core.textutil import stable_id
from tests.factories import city_fact

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def candidate(value: str = "Berlin", events: tuple[str, ...] = ("e2",), cid: str = "new") -> MemoryCandidate:
    return city_fact(stable_id(cid), value, NOW, list(events))


def record(rid: str, value: str, events: tuple[str, ...], status: MemoryStatus = MemoryStatus.ACTIVE) -> MemoryRecord:
    return MemoryRecord(
        id=stable_id(rid),
        tenant_id="t",
        user_id="u",
        type=MemoryType.FACT,
        text=f"User lives in {value}",
        content_hash="h",
        category="location",
        key_name="city",
        value=value,
        importance=0.8,
        confidence=0.9,
        status=status,
        observed_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        source=Provenance(session_id="s", event_ids=list(events)),
    )


def test_new_memory_is_added() -> None:
    decision = decide(candidate(), Neighbours())
    assert decision.action is Action.ADD
    assert decision.record_id == stable_id("new")


def test_new_value_for_a_keyed_fact_supersedes() -> None:
    old = record("old", "Pune", ("e1",))
    decision = decide(candidate("Berlin"), Neighbours(active_fact=old))
    assert decision.action is Action.SUPERSEDE
    assert decision.target == old


def test_same_value_differently_cased_reinforces_and_does_not_supersede() -> None:
    decision = decide(candidate("berlin "), Neighbours(active_fact=record("old", "Berlin", ("e1",))))
    assert decision.action is Action.REINFORCE
    assert decision.record_id == stable_id("old")


def test_restated_fact_reinforces() -> None:
    existing = record("new", "Berlin", ("e1",))
    decision = decide(candidate(events=("e2",)), Neighbours(same_id=existing, active_fact=existing))
    assert decision.action is Action.REINFORCE


def test_redelivered_candidate_is_a_replay_not_a_second_reinforcement() -> None:
    existing = record("new", "Berlin", ("e1", "e2"))
    decision = decide(candidate(events=("e2",)), Neighbours(same_id=existing, active_fact=existing))
    assert decision.action is Action.REPLAYED


def test_exact_duplicate_content_reinforces_the_existing_row() -> None:
    existing = record("other", "Berlin", ("e1",))
    decision = decide(candidate(events=("e9",)), Neighbours(same_content=existing))
    assert decision.action is Action.REINFORCE
    assert decision.record_id == stable_id("other")


def test_value_stated_again_after_supersession_gets_a_new_id() -> None:
    superseded = record("new", "Pune", ("e1",), MemoryStatus.SUPERSEDED)
    current = record("cur", "Berlin", ("e2",))
    decision = decide(candidate("Pune", events=("e3",)), Neighbours(same_id=superseded, active_fact=current))
    assert decision.action is Action.SUPERSEDE
    assert decision.record_id not in {stable_id("new"), stable_id("cur")}
    again = decide(candidate("Pune", events=("e3",)), Neighbours(same_id=superseded, active_fact=current))
    assert again.record_id == decision.record_id


def test_provenance_metadata_keeps_the_newest_entries_that_fit() -> None:
    from agents.provenance import MAX_METADATA_BYTES, recent_metadata

    big = [{"i": i, "blob": "x" * 10_000} for i in range(60)]
    kept = recent_metadata(big)
    assert kept == big[-len(kept) :]
    assert 0 < len(kept) < 60
    assert sum(len(str(e)) for e in kept) <= MAX_METADATA_BYTES
    assert recent_metadata([{"a": 1}, {"b": 2}]) == [{"a": 1}, {"b": 2}]


def preference(text: str, events: tuple[str, ...] = ("e2",), cid: str = "pref") -> MemoryCandidate:
    return candidate(events=events, cid=cid).model_copy(
        update={"type": MemoryType.PREFERENCE, "text": text, "category": "like", "key_name": None, "value": None}
    )


def stored_preference(rid: str, text: str, events: tuple[str, ...] = ("e1",)) -> MemoryRecord:
    return record(rid, "x", events).model_copy(
        update={"type": MemoryType.PREFERENCE, "text": text, "category": "like", "key_name": None, "value": None}
    )


def test_near_duplicate_merges_and_the_more_specific_text_wins() -> None:
    old = stored_preference("old", "User preference: I like hiking.")
    decision = decide(
        preference("User preference: I like hiking in the Alps every summer."),
        Neighbours(similar=old, similarity=0.95),
        merge_similarity=0.92,
    )
    assert decision.action is Action.MERGED
    assert decision.target == old
    assert decision.candidate_wins
    assert decision.record_id == stable_id("pref")


def test_a_vaguer_or_equally_specific_restatement_keeps_the_existing_text() -> None:
    old = stored_preference("old", "User preference: I really love hiking in the mountains.")
    decision = decide(
        preference("User preference: I love hiking in mountains a lot."),
        Neighbours(similar=old, similarity=0.98),
        merge_similarity=0.92,
    )
    assert decision.action is Action.MERGED
    assert not decision.candidate_wins


def test_below_the_merge_threshold_the_candidate_is_added() -> None:
    old = stored_preference("old", "User preference: I like tea.")
    found = Neighbours(similar=old, similarity=0.91)
    assert decide(preference("User preference: I like coffee."), found, merge_similarity=0.92).action is Action.ADD
    assert decide(preference("User preference: I like coffee."), found).action is Action.ADD  # merge off


def test_exchanges_and_episodes_never_merge() -> None:
    old = stored_preference("old", "hello there").model_copy(update={"type": MemoryType.EXCHANGE})
    exchange = preference("hello there!").model_copy(update={"type": MemoryType.EXCHANGE})
    assert decide(exchange, Neighbours(similar=old, similarity=0.99), merge_similarity=0.92).action is Action.ADD


def test_a_retraction_never_merges_with_what_it_reads_like() -> None:
    """ "I'm not vegetarian anymore" is close to "I'm vegetarian"; merged, one would swallow the other."""
    diet = stored_preference("old", "User preference: I'm vegetarian.")
    taken_back = preference("User preference: I'm not vegetarian anymore.").model_copy(
        update={"category": "retraction", "value": "vegetarian"}
    )
    assert decide(taken_back, Neighbours(similar=diet, similarity=0.97), merge_similarity=0.92).action is Action.ADD
    stored = diet.model_copy(update={"category": "retraction", "value": "vegetarian"})
    again = preference("User preference: I'm vegetarian again.")
    assert decide(again, Neighbours(similar=stored, similarity=0.97), merge_similarity=0.92).action is Action.ADD


def test_keyed_facts_merge_only_under_the_same_key() -> None:
    other_key = record("old", "Berlin", ("e1",)).model_copy(
        update={"key_name": "hometown", "text": "User is from Berlin"}
    )
    decision = decide(candidate("Berlin"), Neighbours(similar=other_key, similarity=0.95), merge_similarity=0.92)
    assert decision.action is Action.ADD


def test_a_redelivered_merged_candidate_is_a_replay_not_a_second_merge() -> None:
    survivor = stored_preference("old", "User preference: I really love hiking in the mountains.", ("e1", "e2"))
    decision = decide(
        preference("User preference: I love hiking in mountains a lot.", events=("e2",)),
        Neighbours(similar=survivor, similarity=0.98),
        merge_similarity=0.92,
    )
    assert decision.action is Action.REPLAYED
    assert decision.target == survivor


def test_a_candidate_that_lost_a_merge_replays_by_its_own_id() -> None:
    loser = stored_preference("pref", "User preference: I love it a lot.", ("e2",)).model_copy(
        update={"status": MemoryStatus.MERGED, "superseded_by": stable_id("old")}
    )
    decision = decide(preference("User preference: I love it a lot."), Neighbours(same_id=loser))
    assert decision.action is Action.REPLAYED


def test_unimportant_candidates_are_skipped_but_exact_duplicates_still_reinforce() -> None:
    assert decide(preference("x y z"), Neighbours(), keep=False).action is Action.SKIPPED
    existing = stored_preference("other", "x y z")
    assert decide(preference("x y z"), Neighbours(same_content=existing), keep=False).action is Action.REINFORCE


def test_specificity_counts_entities_numbers_and_content_words() -> None:
    from agents.consolidator.merge import candidate_wins, specificity

    assert specificity("User preference: I like hiking in the Alps in 2024.").entities == 1
    assert specificity("User preference: I like hiking in the Alps in 2024.").numbers == 1
    assert candidate_wins("I like hiking in the Alps", "I like hiking in the mountains")
    assert not candidate_wins("I like hiking", "I like hiking")  # a tie keeps the existing text
    # A name in any script is a name, and whole: "Łódź" is one entity and one content word.
    assert specificity("User preference: I like walking in Łódź.") == specificity(
        "User preference: I like walking in Lodz."
    )


def test_merge_records_keep_one_active_survivor_with_both_sources() -> None:
    from agents.consolidator.apply.records import merge_records
    from agents.consolidator.decide import Decision
    from schemas import EmbeddedCandidate

    old = stored_preference("old", "User preference: I like hiking.").model_copy(update={"importance": 0.7})
    cand = preference("User preference: I like hiking in the Alps.").model_copy(update={"importance": 0.97})
    item = EmbeddedCandidate(tenant_id="t", user_id="u", candidate=cand, vector=[1.0, 0.0], model="m")
    winner, loser = merge_records(item, Decision(Action.MERGED, stable_id("pref"), old, candidate_wins=True), NOW)
    assert (winner.id, winner.text, winner.status) == (stable_id("pref"), cand.text, MemoryStatus.ACTIVE)
    assert (loser.id, loser.status, loser.superseded_by) == (old.id, MemoryStatus.MERGED, winner.id)
    assert winner.importance == 1.0  # max + 0.05, capped
    assert winner.source.event_ids == ["e2", "e1"]
    kept_old, absorbed = merge_records(item, Decision(Action.MERGED, stable_id("pref"), old), NOW)
    assert (kept_old.id, kept_old.text, kept_old.version) == (old.id, old.text, old.version + 1)
    assert kept_old.importance == pytest.approx(1.0)
    assert (absorbed.id, absorbed.status, absorbed.superseded_by) == (stable_id("pref"), MemoryStatus.MERGED, old.id)
    assert set(kept_old.source.event_ids) == {"e1", "e2"}


def test_batch_view_sees_what_the_batch_wrote_and_skips_what_it_retired() -> None:
    from agents.consolidator.merge import BatchView, Similar

    view = BatchView()
    cand = preference("User preference: I like hiking.")
    stale = stored_preference("old", "User preference: I like walks.")
    assert view.best(cand, [1.0, 0.0], [Similar(stale, 0.95, [1.0, 0.1])], 0.92) is not None
    view.wrote(stale.model_copy(update={"status": MemoryStatus.MERGED}), None)
    assert view.best(cand, [1.0, 0.0], [Similar(stale, 0.95, [1.0, 0.1])], 0.92) is None
    fresh = stored_preference("new", "User preference: I like hiking!")
    view.wrote(fresh, [1.0, 0.01])
    best = view.best(cand, [1.0, 0.0], [], 0.92)
    assert best is not None
    assert best.record.id == fresh.id
    assert view.best(cand, [0.0, 1.0], [], 0.92) is None
