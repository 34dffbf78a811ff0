"""Generation names: what each generation is called in Postgres, Kafka, the index and the consumer groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.core import topics
from services.core.config import Settings
from services.core.generations import DEFAULT, Generation, GenerationError, check_name, scoped
from services.core.stages import group_id


def test_the_default_generation_keeps_todays_names() -> None:
    gen = Generation(DEFAULT)
    assert gen.schema == "public"
    assert gen.topics() == topics.BY_ROLE
    assert gen.own_topics() == {}
    assert gen.app_id("memstream") == "memstream"
    assert gen.collection("memories") == "memories"
    assert gen.shard_dir(Path("/d")) == Path("/d/qdrant")
    assert gen.dsn("postgresql://m@h:1/db") == "postgresql://m@h:1/db"


def test_a_generation_has_its_own_schema_intermediate_topics_groups_and_index() -> None:
    gen = Generation("v2")
    assert gen.schema == "g_v2"
    assert gen.topics() == {
        "evicted": "memory.evicted.g-v2",
        "candidates": "memory.candidates.g-v2",
        "embedded": "memory.embedded.g-v2",
        "changes": "memory.changes.g-v2",
        # A generation reads the archive and writes no turns; what users asked, the dead letters and the
        # archive are shared by every generation.
        "turns": "chat.turns",
        "commands": "memory.commands",
        "dlq": "memory.dlq",
        "archive": "memory.archive",
    }
    assert gen.own_topics()["memory.changes"] == "memory.changes.g-v2"
    assert group_id(gen.app_id("memstream"), "consolidator") == "memstream.g-v2-consolidator"
    assert gen.collection("memories") == "memories.g-v2"
    assert gen.shard_dir(Path("/d")) == Path("/d/generations/v2/qdrant")
    assert "search_path=g_v2,public" in gen.dsn("postgresql://m@h:1/db")


def test_scoped_settings_apply_once_and_leave_the_default_alone() -> None:
    base = Settings(data_dir=Path("/d"), pg_dsn="postgresql://m@h:1/db")
    assert scoped(base) is base
    v2 = scoped(base, "v2")
    assert (v2.generation, v2.app_id, v2.qdrant_collection) == ("v2", "memstream.g-v2", "memories.g-v2")
    assert v2.qdrant_path == Path("/d/generations/v2/qdrant")
    assert v2.pg_dsn.count("search_path") == 1
    assert scoped(v2) == v2
    assert scoped(v2, "v2") == v2
    with pytest.raises(GenerationError):
        scoped(v2, "v3")
    from_env = Settings(data_dir=Path("/d"), pg_dsn="postgresql://m@h:1/db", generation="v2")
    assert scoped(from_env) == v2


@pytest.mark.parametrize("name", ["default", "", "V2", "2fast", "a-b", "x" * 31, "drop;table"])
def test_names_that_cannot_be_a_generation_are_refused(name: str) -> None:
    with pytest.raises(GenerationError):
        check_name(name)


@pytest.mark.parametrize("name", ["v2", "minilm_int8", "x" * 30])
def test_names_that_can(name: str) -> None:
    assert check_name(name) == name
