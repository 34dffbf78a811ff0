from schemas.generate import JSON_DIR, render


def test_committed_json_schemas_match_the_models() -> None:
    rendered = render()
    on_disk = {p.name: p.read_text() for p in JSON_DIR.glob("*.schema.json")}
    assert on_disk == rendered, "schemas drifted: run `make schemas` and commit schemas/json"
