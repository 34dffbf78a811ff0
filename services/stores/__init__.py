"""Store adapters: Postgres (source of truth) and the Qdrant recall index."""

from __future__ import annotations

import re

from services.core.config import Settings
from services.stores.vector import VectorIndex


def model_suffix(settings: Settings) -> str:
    """ "" for the packaged MiniLM; else the embedding model and dimension, so two models never share an index."""
    if not settings.embed_base_url:
        return ""
    slug = re.sub(r"[^a-z0-9]+", "-", settings.embed_model.lower()).strip("-")
    return f"__{slug}_{settings.embed_dimension}"


def open_vector_index(settings: Settings) -> VectorIndex:
    """Qdrant server when `qdrant_url` is set, else the in-process Edge shard; one collection per model."""
    suffix = model_suffix(settings)
    if settings.qdrant_url:
        from services.stores.qdrant_server_index import ServerIndex

        return ServerIndex(settings.qdrant_url, settings.qdrant_collection + suffix, settings.qdrant_api_key)
    from services.stores.qdrant_edge_index import EdgeIndex

    return EdgeIndex(settings.qdrant_path / suffix.lstrip("_") if suffix else settings.qdrant_path)
