"""Episode coverage of LoCoMo's reference summaries: stems, the ratio, and the per-session episode lines."""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from schemas import MemoryRecord
from tests.bench import locomo
from tests.bench.coverage import (
    Episode,
    coverage_summary,
    covered,
    format_coverage,
    reference_summaries,
    session_lines,
    stems,
)
from tests.bench.resummarize import chunk_of, turns_by_dia

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely!"},
        ],
        "session_2_date_time": "9:05 am on 3 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Back from Oslo."}],
        "session_3_date_time": "9:05 am on 4 June, 2023",
        "session_3": [{"speaker": "Ann", "dia_id": "D3:1", "text": "Hi."}],
    },
    "session_summary": {
        "session_1_summary": "Ann adopted a cat.",
        "session_2_summary": "Bo came back from Oslo.",
        "session_3_summary": "Ann greeted Bo.",
    },
    "qa": [],
}


def episode(text: str, *dia_ids: str, session_id: str = "conv-x-s1") -> Episode:
    return Episode(
        text, {"session_id": session_id, "event_ids": list(dia_ids), "metadata": [{"dia_id": d} for d in dia_ids]}
    )


def test_stems_drop_stopwords_and_case_and_meet_across_inflections() -> None:
    assert stems("She was painting THE lakes") == stems("painted a lake")
    assert stems("the and of it is was") == set()
    assert stems("Caroline's adoption agencies") == stems("caroline adopting agency")


def test_coverage_is_zero_when_the_episodes_share_no_content_word() -> None:
    assert covered("Ann adopted a cat.", ["Bo flew to Oslo.", "Weather was rainy."]) == (0, 3)
    assert covered("Ann adopted a cat.", []) == (0, 3)


def test_coverage_is_one_when_the_episodes_hold_every_content_word_in_any_form() -> None:
    assert covered("Ann adopted a cat.", ["ann: we are adopting", "Cats!"]) == (3, 3)


def test_coverage_counts_distinct_stems_once() -> None:
    # "painted" and "painting" are one stem: 1 of 2 (paint, lake), not 2 of 3.
    assert covered("She painted, painting a lake.", ["painting"]) == (1, 2)


def test_reference_summaries_by_session_number() -> None:
    refs = reference_summaries(
        {"session_summary": {"session_10_summary": "x y", "session_2_summary": "", "events": "z"}}
    )
    assert refs == {10: "x y"}
    assert reference_summaries({}) == {}


def test_an_episode_belongs_to_the_sessions_of_its_turns() -> None:
    assert episode("t", "D3:5", "D:4:1").sessions() == {3, 4}
    # No dia_ids (another dataset's turns): the bench's session id names it.
    assert Episode("t", {"session_id": "conv-x-s12", "metadata": [{}]}).sessions() == {12}
    assert Episode("t", {"session_id": "other"}).sessions() == set()


def test_session_lines_list_every_session_and_episodes_in_turn_order() -> None:
    late = episode("late", "D1:9", "D2:1")
    early = episode("early", "D1:1", "D1:2")
    lines = session_lines("conv-x", [3, 1, 2], [late, early])
    assert lines == [
        {"sample_id": "conv-x", "session": 1, "episodes": ["early", "late"]},
        {"sample_id": "conv-x", "session": 2, "episodes": ["late"]},
        {"sample_id": "conv-x", "session": 3, "episodes": []},
    ]


def test_coverage_summary_macro_micro_and_lengths() -> None:
    lines = [
        {"sample_id": "c", "session": 1, "episodes": ["cat adopted"]},  # 2 of 3 (ann, adopt, cat)
        {"sample_id": "c", "session": 2, "episodes": []},  # 0 of 1 (oslo)
        {"sample_id": "c", "session": 3, "episodes": ["no reference here"]},  # not scored
    ]
    references = {("c", 1): "Ann adopted a cat.", ("c", 2): "Oslo!"}
    episodes = [Episode("cat adopted", {}), Episode("no reference here", {})]
    summary = coverage_summary(lines, references, episodes)
    assert summary["sessions"] == 2
    assert summary["sessions_without_episodes"] == 1
    assert summary["coverage"] == pytest.approx((2 / 3 + 0) / 2)
    assert summary["coverage_micro"] == pytest.approx(2 / 4)
    assert summary["episodes"] == 2
    assert summary["mean_episode_tokens"] == pytest.approx(2.5)  # 2 and 3 tokens
    assert summary["mean_episode_tokens_per_session"] == pytest.approx(1.0)  # 2 and 0, scored sessions only
    assert "33.3%" in format_coverage(summary)


def test_the_bench_writes_one_line_per_session_and_scores_against_the_references() -> None:
    episodes = {"conv-x": [episode("Ann adopted a cat.", "D1:1", "D1:2"), episode("Bo: Back from Oslo.", "D2:1")]}
    lines, summary = locomo.episode_coverage([SAMPLE], episodes)
    assert [(line["session"], line["episodes"]) for line in lines] == [
        (1, ["Ann adopted a cat."]),
        (2, ["Bo: Back from Oslo."]),
        (3, []),
    ]
    assert all(line["sample_id"] == "conv-x" for line in lines)
    # Session 1 fully, session 2 without "came" (bo, back, oslo of bo, came, back, oslo), session 3 not at all.
    assert summary["coverage"] == pytest.approx((1 + 3 / 4 + 0) / 3)
    assert summary["episodes"] == 2


def test_episodes_file_sits_beside_the_results() -> None:
    assert locomo.episodes_path(Path("bench-results/locomo.jsonl")) == Path("bench-results/locomo-episodes.jsonl")
    assert locomo.episodes_path(Path("/tmp/run2.jsonl")) == Path("/tmp/run2-episodes.jsonl")


def test_an_episode_is_summarized_again_from_the_turns_its_provenance_names() -> None:
    turns = turns_by_dia([SAMPLE], {"conv-x": "u1"})
    assert sorted(turns)[:3] == [("u1", "D1:1"), ("u1", "D1:2"), ("u1", "D2:1")]
    assert turns[("u1", "D1:1")].content == "Ann: I adopted a cat."
    now = datetime(2023, 6, 3, tzinfo=UTC)
    record = MemoryRecord.model_validate(
        {
            "id": "00000000-0000-4000-8000-000000000001",
            "tenant_id": locomo.TENANT,
            "user_id": "u1",
            "type": "episode",
            "text": "stored",
            "content_hash": "h",
            "importance": 0.5,
            "confidence": 1.0,
            "status": "active",
            "observed_at": now,
            "created_at": now,
            "updated_at": now,
            "source": {
                "session_id": "conv-x-s1",
                "event_ids": ["e1", "e2"],
                "metadata": [{"dia_id": "D1:2"}, {"dia_id": "D1:1"}, {}],
            },
        }
    )
    # In provenance order; a metadata entry without a dia_id (or of another user) names no turn.
    assert [t.content for t in chunk_of(record, turns)] == ["Bo: Lovely!", "Ann: I adopted a cat."]
