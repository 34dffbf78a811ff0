"""The production components in containers: skipped where no Docker engine runs."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest


def _docker_available() -> bool:
    # With no engine, docker-py's client fails in its constructor with its socket still open; that socket is
    # collected here, its ResourceWarning silenced, instead of failing whichever test runs when it is collected.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            import docker

            docker.from_env().ping()
            return True
        except Exception:
            return False
        finally:
            gc.collect()


pytestmark = pytest.mark.skipif(not _docker_available(), reason="no Docker engine on this machine")


@pytest.fixture(scope="module")
def qdrant_url() -> Iterator[str]:
    from testcontainers.qdrant import QdrantContainer

    with QdrantContainer("qdrant/qdrant:v1.12.0") as container:
        yield f"http://{container.get_container_host_ip()}:{container.get_exposed_port(6333)}"


async def test_server_index_against_a_real_qdrant_server(qdrant_url: str) -> None:
    from services.stores.qdrant_server_index import ServerIndex
    from services.stores.vector import Bm25Encoder, IndexedMemory, Scope
    from tests.index_probe import search

    index = ServerIndex(qdrant_url, "memories")
    await index.ensure(3)
    payload = {"tenant_id": "t", "user_id": "u", "type": "exchange", "status": "active", "text": "green tea"}
    await index.upsert(
        [IndexedMemory("00000000-0000-0000-0000-000000000001", [1, 0, 0], Bm25Encoder().document("green tea"), payload)]
    )
    hits = await search(index, Scope("t", "u"), [1.0, 0.0, 0.0], Bm25Encoder().query("tea"), 5)
    assert [h.payload["text"] for h in hits] == ["green tea"]


def test_pgvector_container_migrates() -> None:
    import asyncio

    from testcontainers.postgres import PostgresContainer

    from services.stores.postgres import migrate

    with PostgresContainer("pgvector/pgvector:pg17", driver=None) as pg:
        applied = asyncio.run(migrate(pg.get_connection_url()))
        assert applied == [1]
