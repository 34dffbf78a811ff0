"""The read service follows the serving generation: a switch in the registry moves its reads and its index to
the generation's schema and index in one step, and back; the agents' Runtime never moves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from schemas import MemoryRecord
from services.api.health import Readiness
from services.api.serving import ServingGeneration
from services.core import generations
from services.core.config import Settings
from services.runtime import Runtime
from services.stores.postgres import MemoryWriter
from services.stores.postgres import generations as registry
from tests.factories import memory_record

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def memory(text: str) -> MemoryRecord:
    return memory_record(text, at=NOW)


@pytest.fixture
async def runtime(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = Runtime.create(Settings(data_dir=tmp_path, pg_dsn=pg_dsn, qdrant_url=None, generation_refresh_seconds=0.1))
    await rt.start()
    yield rt
    await rt.stop()


async def texts(rt: Runtime) -> list[str]:
    return [m.text for m in await rt.reads.list_memories("t", "u", type_=None, status=None, limit=10, offset=0)]


async def test_a_switch_moves_the_read_service_and_only_the_read_service(runtime: Runtime, pg_dsn: str) -> None:
    writer = MemoryWriter()
    async with runtime.pg.transaction("default") as c:
        await writer.upsert(c, memory("served by the default"), None)
    async with await AsyncConnection.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        await registry.begin(conn, "v2", source="memory.archive")
        v2 = generations.scoped(runtime.settings, "v2")
        async with await AsyncConnection.connect(v2.pg_dsn, autocommit=True, row_factory=dict_row) as gen:
            await writer.upsert(gen, memory("derived again in v2"), None)
        await registry.set_state(conn, "v2", "ready")

        serving = ServingGeneration.for_read_service(runtime)
        readiness = Readiness(serving.rt, serving)
        await serving.refresh()
        assert readiness.report() == {"generation": "default", "rebuilding": {}}
        assert await texts(serving.rt) == ["served by the default"]

        await registry.switch(conn, "v2")
        await serving.refresh()

        assert readiness.report()["generation"] == "v2"
        assert await texts(serving.rt) == ["derived again in v2"]
        assert serving.rt.index is not runtime.index  # v2's own shard, under data_dir/generations/v2
        assert await texts(runtime) == ["served by the default"]  # the agents' Runtime stayed where it was
        checks = await readiness.check()
        assert checks["postgres"] is True
        assert checks["qdrant"] is True
        exposed = generate_latest().decode()
        assert 'memstream_generation_serving{generation="v2"} 1.0' in exposed
        assert 'memstream_generation_serving{generation="default"} 0.0' in exposed

        await registry.switch(conn, "default")
        await serving.refresh()
        assert readiness.report()["generation"] == "default"
        assert await texts(serving.rt) == ["served by the default"]
        assert serving.rt.index is runtime.index


async def test_a_generation_being_built_reports_its_lag(runtime: Runtime, pg_dsn: str) -> None:
    async with await AsyncConnection.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        await registry.begin(conn, "v3", source="memory.archive")
        await registry.set_state(conn, "v3", "building", {"lag": 1234})
    serving = ServingGeneration.for_read_service(runtime)
    await serving.refresh()
    assert serving.report() == {"generation": "default", "rebuilding": {"v3": 1234}}
    assert 'memstream_generation_rebuild_lag_messages{generation="v3"} 1234.0' in generate_latest().decode()
