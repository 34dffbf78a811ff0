"""What agents share in one worker process: settings, stores, model, topics."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import faust

from services.config import Settings
from services.embedding import CachedEmbedder, Embedder, MiniLmEmbedder
from services.stores import open_vector_index
from services.stores.postgres import PostgresStore, migrate
from services.stores.vector import Bm25Encoder, VectorIndex

TOPIC_NAMES = {
    "turns": "chat.turns",
    "evicted": "memory.evicted",
    "candidates": "memory.candidates",
    "embedded": "memory.embedded",
    "commands": "memory.commands",
    "changes": "memory.changes",
    "dlq": "memory.dlq",
}


@dataclass
class Topics:
    turns: Any
    evicted: Any
    candidates: Any
    embedded: Any
    commands: Any
    changes: Any
    dlq: Any

    @classmethod
    def declare(cls, app: faust.App) -> Topics:
        def raw(name: str) -> Any:
            return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

        return cls(**{attr: raw(name) for attr, name in TOPIC_NAMES.items()})


@dataclass
class Runtime:
    settings: Settings
    pg: PostgresStore
    index: VectorIndex
    bm25: Bm25Encoder
    _embedder: Embedder | None = None
    _embedder_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def create(cls, settings: Settings) -> Runtime:
        return cls(
            settings=settings,
            pg=PostgresStore(settings.pg_dsn, settings.pg_pool_size),
            index=open_vector_index(settings),
            bm25=Bm25Encoder(),
        )

    async def start(self, *, with_model: bool = True) -> None:
        await migrate(self.settings.pg_dsn)
        await self.pg.open()
        dimension = (await self.embedder()).dimension if with_model else 384
        await self.index.ensure(dimension)

    async def embedder(self) -> Embedder:
        """Loaded once, off the event loop (building the graph takes ~1 s)."""
        async with self._embedder_lock:
            if self._embedder is None:
                s = self.settings
                model = await asyncio.to_thread(
                    MiniLmEmbedder, s.embed_model_dir, s.embed_threads, 256, s.embed_batch_size
                )
                self._embedder = CachedEmbedder(model, s.embed_cache_size)
            return self._embedder

    async def stop(self) -> None:
        await self.pg.close()
        await self.index.close()
