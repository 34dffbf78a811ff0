from schemas.generate import JSON_DIR, render


def test_committed_json_schemas_match_the_models() -> None:
    rendered = render()
    on_disk = {p.name: p.read_text() for p in JSON_DIR.glob("*.schema.json")}
    assert on_disk == rendered, "schemas drifted: run `make schemas` and commit schemas/json"


def candidate_json() -> dict[str, object]:
    from services.core.textutil import stable_id

    return {
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


def test_memory_ids_must_be_uuids() -> None:
    import pytest
    from pydantic import ValidationError

    from schemas import MemoryCandidate
    from services.core.textutil import stable_id

    good = candidate_json()
    assert MemoryCandidate.model_validate(good).candidate_id == stable_id("x")
    with pytest.raises(ValidationError, match="candidate_id"):
        MemoryCandidate.model_validate({**good, "candidate_id": "seed-4"})


def test_topic_names_in_code_are_the_ones_topics_yaml_declares() -> None:
    from ops.topics import load_specs
    from services.core import topics
    from tests.stack import ROOT

    declared = {spec.name for spec in load_specs(ROOT / "topics.yaml")}
    assert set(topics.BY_ROLE.values()) == declared


def test_committed_schemas_are_draft_2020_12_and_use_portable_regexes() -> None:
    import json
    import re

    import jsonschema

    def patterns(node: object) -> list[str]:
        if isinstance(node, dict):
            own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
            return own + [p for v in node.values() for p in patterns(v)]
        if isinstance(node, list):
            return [p for v in node for p in patterns(v)]
        return []

    found = []
    for path in JSON_DIR.glob("*.schema.json"):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        found += patterns(schema)
    assert found
    # \d, \s and \w mean different things in ECMA-262 and Python; lookaround and
    # backreferences are outside the subset JSON Schema recommends.
    for pattern in found:
        assert not re.search(r"\\[dDsSwWbB1-9]|\(\?[=!<]", pattern), pattern


def test_memory_contracts_carry_the_event_identifier_rules() -> None:
    import pytest
    from pydantic import ValidationError

    from schemas import EvictedChunk, MemoryCandidate, Provenance

    candidate = candidate_json()
    for bad in ("x\x1fp", "a:b", "", "u\x00", "a b"):
        with pytest.raises(ValidationError, match="tenant_id"):
            MemoryCandidate.model_validate({**candidate, "tenant_id": bad})
        with pytest.raises(ValidationError, match="session_id"):
            Provenance(session_id=bad, event_ids=["e"])
    with pytest.raises(ValidationError, match="user_id"):
        EvictedChunk(tenant_id="t", user_id="u\ud800", session_id="s", reason="trimmed", turns=[], cause=[])
