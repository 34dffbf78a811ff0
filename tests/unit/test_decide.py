from datetime import UTC, datetime

from agents.consolidator.decide import Action, Neighbours, decide
from schemas import MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType, Provenance
from services.textutil import stable_id

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def candidate(value: str = "Berlin", events: tuple[str, ...] = ("e2",), cid: str = "new") -> MemoryCandidate:
    return MemoryCandidate(
        candidate_id=stable_id(cid),
        tenant_id="t",
        user_id="u",
        type=MemoryType.FACT,
        text=f"User lives in {value}",
        category="location",
        key_name="city",
        value=value,
        importance=0.8,
        confidence=0.9,
        observed_at=NOW,
        source=Provenance(session_id="s", event_ids=list(events)),
        extractor="test",
    )


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


def test_same_value_differently_cased_does_not_supersede() -> None:
    decision = decide(candidate("berlin "), Neighbours(active_fact=record("old", "Berlin", ("e1",))))
    assert decision.action is Action.ADD


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
    from agents.consolidator.apply import MAX_METADATA_BYTES, recent_metadata

    big = [{"i": i, "blob": "x" * 10_000} for i in range(60)]
    kept = recent_metadata(big)
    assert kept == big[-len(kept) :]
    assert 0 < len(kept) < 60
    assert sum(len(str(e)) for e in kept) <= MAX_METADATA_BYTES
    assert recent_metadata([{"a": 1}, {"b": 2}]) == [{"a": 1}, {"b": 2}]
