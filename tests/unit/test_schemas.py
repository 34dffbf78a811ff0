from schemas.generate import JSON_DIR, render


def test_committed_json_schemas_match_the_models() -> None:
    rendered = render()
    on_disk = {p.name: p.read_text() for p in JSON_DIR.glob("*.schema.json")}
    assert on_disk == rendered, "schemas drifted: run `make schemas` and commit schemas/json"


def test_memory_ids_must_be_uuids() -> None:
    import pytest
    from pydantic import ValidationError

    from schemas import MemoryCandidate
    from services.textutil import stable_id

    good = {
        "candidate_id": stable_id("x"),
        "tenant_id": "t",
        "user_id": "u",
        "type": "exchange",
        "text": "hello",
        "importance": 0.5,
        "confidence": 1.0,
        "observed_at": "2026-01-01T00:00:00Z",
        "source": {"session_id": "s", "event_ids": ["e"]},
        "extractor": "test",
    }
    assert MemoryCandidate.model_validate(good).candidate_id == stable_id("x")
    with pytest.raises(ValidationError, match="candidate_id"):
        MemoryCandidate.model_validate({**good, "candidate_id": "seed-4"})


def test_topic_names_in_code_are_the_ones_topics_yaml_declares() -> None:
    from ops.topics import load_specs
    from services import topics
    from tests.stack import ROOT

    declared = {spec.name for spec in load_specs(ROOT / "topics.yaml")}
    assert set(topics.BY_ROLE.values()) == declared
