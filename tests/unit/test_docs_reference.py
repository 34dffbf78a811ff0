"""The generated reference pages cover everything they are generated from.

The site build (`make check`) fails on a broken link, not on a missing row:
these tests are what says every setting, route and topic reaches the docs.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ops.docs_memory import render_memory_model
from ops.docs_openapi import METHODS, openapi_document, render_api, schema_type
from ops.docs_settings import render_settings, render_topics
from schemas.memory import MemoryLayer, MemoryStatus, MemoryType
from services.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_listed_under_its_environment_variable_with_its_comment() -> None:
    page = render_settings()
    for name in Settings.model_fields:
        assert f"| `MEMSTREAM_{name.upper()}` |" in page
    # The comment right above a field is its meaning; a section comment is a heading, not a meaning.
    assert "| `MEMSTREAM_RETRY_MAX_BACKOFF` | `float` | `30.0` | Longest wait between retries" in page
    assert "## Tending memory" in page
    assert "README" not in page


def test_every_operation_of_the_openapi_document_has_a_section() -> None:
    spec = openapi_document()
    page = render_api(spec)
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                assert f"### `{method.upper()} {path}`" in page
    for name in spec["components"]["schemas"]:
        assert f"### {name}\n" in page


def test_schema_types_read_as_text() -> None:
    assert schema_type({"$ref": "#/components/schemas/Memory"}) == "[Memory](#memory)"
    assert schema_type({"type": "array", "items": {"type": "string"}}) == "array of string"
    assert schema_type({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == "integer \\| null"
    assert schema_type({"enum": ["add", "correct"]}) == '"add" \\| "correct"'


def test_every_topic_is_listed() -> None:
    page = render_topics(ROOT / "topics.yaml")
    for name in yaml.safe_load((ROOT / "topics.yaml").read_text())["topics"]:
        assert f"| `{name}` |" in page
    assert "| `memory.changes` | 8 | forever |" in page


def test_every_memory_type_layer_and_status_is_listed() -> None:
    page = render_memory_model()
    for enum in (MemoryType, MemoryLayer, MemoryStatus):
        for member in enum:
            assert f"| `{member.value}` |" in page
    assert "| `exchange` | `episodic` | a raw user turn" in page
