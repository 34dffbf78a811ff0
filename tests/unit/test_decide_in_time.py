"""Observation time, not arrival order, decides which version of a keyed fact is current (decide.in_time),
and what a late statement does to reinforcement, merges, LLM verdicts and corrections. Pure: no store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agents.consolidator import command_plan as plan
from agents.consolidator.apply.records import merge_records, reinforced, resumed
from agents.consolidator.decide import Action, Decision, Neighbours, decide
from agents.consolidator.merge import candidate_wins
from schemas import EmbeddedCandidate, MemoryCandidate, MemoryRecord, MemoryStatus, MemoryType
from schemas.commands import CorrectMemory
from services.core.textutil import content_hash, normalize, stable_id
from tests.factories import city_fact

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def said(value: str, day: int, event: str | None = None) -> MemoryCandidate:
    """ "I live in <value>" said on day `day`; its id is the rule path's: the key and the value."""
    return city_fact(stable_id("city", normalize(value)), value, T0 + day * DAY, [event or f"e-{value}-{day}"])


def version(
    value: str, day: int, *, until: int | None = None, by: str | None = None, rid: str | None = None
) -> MemoryRecord:
    c = said(value, day)
    return MemoryRecord(
        id=rid or c.candidate_id,
        tenant_id="t",
        user_id="u",
        type=MemoryType.FACT,
        text=c.text,
        content_hash=content_hash(c.text),
        category="location",
        key_name="city",
        value=value,
        importance=0.8,
        confidence=0.9,
        status=MemoryStatus.ACTIVE if until is None else MemoryStatus.SUPERSEDED,
        observed_at=c.observed_at,
        created_at=T0,
        updated_at=T0,
        superseded_at=None if until is None else T0 + until * DAY,
        superseded_by=by,
        source=c.source,
    )


def placed(candidate: MemoryCandidate, *versions: MemoryRecord) -> Decision:
    same = next((v for v in versions if v.id == candidate.candidate_id), None)
    active = next((v for v in versions if v.status is MemoryStatus.ACTIVE), None)
    return decide(candidate, Neighbours(same_id=same, active_fact=active, versions=versions))


def test_a_value_observed_before_the_current_one_becomes_history_not_the_current_value() -> None:
    today = version("Lisbon", 365)
    decision = placed(said("Berlin", 0), today)
    assert decision.action is Action.HISTORY
    assert decision.record_id == said("Berlin", 0).candidate_id
    # True from its own observation until the current value was observed; the current one is not touched.
    assert decision.ends_at == today.observed_at
    assert decision.ends_by == today.id
    assert decision.cut is None


def test_a_newer_value_supersedes_the_current_one() -> None:
    before = version("Berlin", 0)
    decision = placed(said("Lisbon", 365), before)
    assert decision.action is Action.SUPERSEDE
    assert decision.target == before


def test_a_value_between_two_versions_takes_the_interval_and_cuts_the_earlier_one() -> None:
    lisbon = version("Lisbon", 20)
    berlin = version("Berlin", 0, until=20, by=lisbon.id)
    decision = placed(said("Paris", 10), berlin, lisbon)
    assert decision.action is Action.HISTORY
    assert (decision.ends_at, decision.ends_by) == (T0 + 20 * DAY, lisbon.id)
    assert decision.cut == berlin  # Berlin now ends on day 10, superseded by Paris


def test_a_restatement_within_a_versions_time_reinforces_it() -> None:
    lisbon = version("Lisbon", 20)
    berlin = version("Berlin", 0, until=20, by=lisbon.id)
    decision = placed(said("Berlin", 5), berlin, lisbon)
    assert decision.action is Action.REINFORCE
    assert decision.target == berlin
    assert decision.cut is None


def test_a_statement_just_before_the_same_value_reinforces_it_from_the_earlier_time() -> None:
    lisbon = version("Lisbon", 20)
    berlin = version("Berlin", 0, until=20, by=lisbon.id)
    decision = placed(said("Lisbon", 10), berlin, lisbon)
    assert decision.action is Action.REINFORCE
    assert decision.target == lisbon
    assert decision.cut == berlin  # Berlin ends on day 10 now, still followed by Lisbon
    item = EmbeddedCandidate(tenant_id="t", user_id="u", candidate=said("Lisbon", 10), vector=[1.0], model="m")
    assert reinforced(lisbon, item, T0).observed_at == T0 + 10 * DAY


def test_the_same_value_said_before_another_version_is_a_version_of_its_own() -> None:
    lisbon = version("Lisbon", 20)
    berlin = version("Berlin", 10, until=20, by=lisbon.id)
    decision = placed(said("Lisbon", 0), berlin, lisbon)
    assert decision.action is Action.HISTORY
    assert decision.record_id not in {lisbon.id, berlin.id}  # the key's value id is taken: a new version id
    assert (decision.ends_at, decision.ends_by) == (berlin.observed_at, berlin.id)
    assert decision.cut is None


def test_a_redelivered_statement_is_a_replay_wherever_its_version_is() -> None:
    lisbon = version("Lisbon", 20)
    berlin = version("Berlin", 0, until=20, by=lisbon.id)
    assert placed(said("Berlin", 0), berlin, lisbon).action is Action.REPLAYED
    assert placed(said("Berlin", 0), berlin, lisbon).target == berlin


def test_nothing_ends_before_it_was_observed() -> None:
    lisbon = version("Lisbon", 20)
    berlin = version("Berlin", 0, until=20, by=lisbon.id)
    for day in range(-3, 25):
        decision = placed(said("Paris", day), berlin, lisbon)
        if decision.ends_at is not None:
            assert decision.ends_at >= said("Paris", day).observed_at
        if decision.action is Action.SUPERSEDE:
            assert decision.target is not None
            assert decision.target.observed_at <= said("Paris", day).observed_at


def test_reinforcement_keeps_the_earliest_observation_whatever_arrives_last() -> None:
    record = version("Lisbon", 5)
    late = EmbeddedCandidate(tenant_id="t", user_id="u", candidate=said("Lisbon", 9), vector=[1.0], model="m")
    early = EmbeddedCandidate(tenant_id="t", user_id="u", candidate=said("Lisbon", 1), vector=[1.0], model="m")
    assert reinforced(record, late, T0).observed_at == record.observed_at
    assert reinforced(record, early, T0).observed_at == T0 + DAY


def test_an_equally_specific_wording_said_first_wins_a_merge_whichever_arrives_first() -> None:
    first, second = "User preference: I love hiking in mountains.", "User preference: I adore hiking on peaks."
    # `first` was said before `second`: it survives whether it is the candidate or the stored memory.
    assert candidate_wins(first, second, earlier=True)
    assert not candidate_wins(second, first, earlier=False)
    assert candidate_wins("I like hiking in the Alps", "I like hiking in the mountains", earlier=False)


def test_a_merge_retires_the_loser_no_earlier_than_either_observation() -> None:
    stored = version("Lisbon", 10).model_copy(update={"type": MemoryType.PREFERENCE, "category": None})
    for day, wins in ((2, True), (2, False), (30, True), (30, False)):
        c = said("Lisbon", day).model_copy(update={"type": MemoryType.PREFERENCE, "candidate_id": stable_id("x")})
        item = EmbeddedCandidate(tenant_id="t", user_id="u", candidate=c, vector=[1.0], model="m")
        winner, loser = merge_records(item, Decision(Action.MERGED, c.candidate_id, stored, candidate_wins=wins), T0)
        assert loser.superseded_at == max(c.observed_at, stored.observed_at)
        assert loser.superseded_at >= loser.observed_at
        assert winner.observed_at == (c.observed_at if wins else stored.observed_at)


def test_a_correction_is_current_at_its_own_time_never_before_what_it_corrects() -> None:
    current = version("Lisbon", 30)
    cmd = CorrectMemory(
        command_id=stable_id("c1"),
        new_id=stable_id("porto"),
        tenant_id="t",
        user_id="u",
        memory_id=current.id,
        text="User lives in Porto",
        at=T0 + DAY,
    )
    old, new = plan.corrected(current, cmd, T0 + 40 * DAY)
    assert new.observed_at == current.observed_at == old.superseded_at  # the command's `at` was earlier
    later = cmd.model_copy(update={"at": T0 + 35 * DAY})
    old, new = plan.corrected(current, later, T0 + 40 * DAY)
    assert new.observed_at == old.superseded_at == T0 + 35 * DAY
    assert new.status is MemoryStatus.ACTIVE
    assert old.status is MemoryStatus.SUPERSEDED


def test_a_value_said_between_two_statements_folded_into_one_version_splits_it() -> None:
    berlin = version("Berlin", 1)
    again = EmbeddedCandidate(tenant_id="t", user_id="u", candidate=said("Berlin", 9), vector=[1.0], model="m")
    berlin = reinforced(berlin, again, T0)  # said on day 1 and day 9: one version, observed since day 1
    assert berlin.observed_at == T0 + DAY
    decision = placed(said("Lisbon", 5), berlin)
    # Not current: Berlin was said again after it. Lisbon holds from day 5 until Berlin's restatement on day 9.
    assert decision.action is Action.HISTORY
    assert decision.cut == berlin
    assert decision.split_at == T0 + 9 * DAY
    part = resumed(berlin, T0 + 9 * DAY, T0)
    assert (part.value, part.status, part.observed_at) == ("Berlin", MemoryStatus.ACTIVE, T0 + 9 * DAY)
    assert part.source.event_ids == [said("Berlin", 9).source.event_ids[0]]
    assert part.id != berlin.id
