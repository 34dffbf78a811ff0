"""Store adapters: Postgres (source of truth) and the Qdrant recall index."""

from __future__ import annotations

from services.config import Settings
from services.stores.vector import VectorIndex


def open_vector_index(settings: Settings) -> VectorIndex:
    """Qdrant server when `qdrant_url` is set, else the in-process Edge shard."""
    if settings.qdrant_url:
        from services.stores.qdrant_server_index import ServerIndex

        return ServerIndex(settings.qdrant_url, settings.qdrant_collection)
    from services.stores.qdrant_edge_index import EdgeIndex

    return EdgeIndex(settings.qdrant_path)
