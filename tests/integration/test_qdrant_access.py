"""Who can reach the vector index: the Qdrant server's API key goes with every request, the Edge shard is 0700."""

from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import SecretStr

from services.core.config import Settings
from services.stores import open_vector_index
from services.stores.qdrant_edge_index import EdgeIndex
from services.stores.qdrant_server_index import ServerIndex

KEY = "qdrant-test-key-0123456789"


class _Recorder(BaseHTTPRequestHandler):
    """Answers like a Qdrant server with no collections, and keeps each request's `api-key` header."""

    seen: list[str | None]

    def do_GET(self) -> None:
        self.server.seen.append(self.headers.get("api-key"))  # type: ignore[attr-defined]
        body = json.dumps({"result": {"exists": False}, "status": "ok", "time": 0.0}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def qdrant_like() -> Iterator[tuple[str, list[str | None]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
async def test_the_server_index_sends_the_configured_api_key(
    qdrant_like: tuple[str, list[str | None]], tmp_path: Path
) -> None:
    url, seen = qdrant_like
    settings = Settings(data_dir=tmp_path, qdrant_url=url, qdrant_api_key=SecretStr(KEY))
    index = open_vector_index(settings)
    assert isinstance(index, ServerIndex)
    try:
        assert not await index._client.collection_exists("memories")
    finally:
        await index.close()
    assert seen
    assert set(seen) == {KEY}
    assert KEY not in repr(settings)
    assert KEY not in str(settings.model_dump())


async def test_without_a_key_none_is_sent(qdrant_like: tuple[str, list[str | None]]) -> None:
    url, seen = qdrant_like
    index = ServerIndex(url, "memories")
    try:
        await index._client.collection_exists("memories")
    finally:
        await index.close()
    assert seen
    assert set(seen) == {None}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_edge_shard_directory_is_created_private(tmp_path: Path) -> None:
    shard = tmp_path / "data" / "qdrant" / "model"
    index = EdgeIndex(shard)
    await index.ensure(3)
    await index.close()
    assert _mode(shard) == 0o700
    assert _mode(shard.parent) == 0o700  # data_dir/qdrant, created for it
    assert _mode(shard.parent.parent) == 0o700


async def test_an_existing_open_shard_directory_is_narrowed(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    index = EdgeIndex(shard)
    await index.ensure(3)
    await index.close()
    shard.chmod(0o755)
    again = EdgeIndex(shard)
    await again.ensure(3)
    await again.close()
    assert _mode(shard) == 0o700
