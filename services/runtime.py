"""What one process shares: settings, stores and the model (no Faust here: the read service uses it too)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.archive.keys import KeyStore
from services.core.config import Settings
from services.embedding import CachedEmbedder, Embedder, MiniLmEmbedder
from services.llm import LlmClient
from services.stores import open_vector_index
from services.stores.postgres import (
    CorpusCounts,
    MemoryReader,
    MemoryWriter,
    Outbox,
    PgPool,
    SummaryStore,
    WindowStore,
    migrate,
)
from services.stores.vector import Bm25Encoder, VectorIndex


@dataclass
class Runtime:
    settings: Settings
    pg: PgPool
    windows: WindowStore
    outbox: Outbox
    memories: MemoryWriter
    reads: MemoryReader
    index: VectorIndex
    bm25: Bm25Encoder
    summaries: SummaryStore
    corpus: CorpusCounts
    # One client per process, so its concurrency limit is the process's; None = no LLM.
    llm: LlmClient | None = None
    _embedder: Embedder | None = None
    _embedder_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _keys: KeyStore | None = None

    @classmethod
    def create(cls, settings: Settings) -> Runtime:
        pool = PgPool(
            settings.pg_dsn,
            settings.pg_pool_size,
            connect_timeout=settings.pg_connect_timeout,
            pool_timeout=settings.pg_pool_timeout,
        )
        return cls(
            settings=settings,
            pg=pool,
            windows=WindowStore(pool),
            outbox=Outbox(pool),
            memories=MemoryWriter(),
            reads=MemoryReader(pool),
            index=open_vector_index(settings),
            bm25=Bm25Encoder.from_settings(settings),
            summaries=SummaryStore(pool),
            corpus=CorpusCounts(pool),
            llm=LlmClient.from_settings(settings),
        )

    async def start(self, *, with_model: bool = True, with_index: bool = True) -> None:
        """`with_index=False` for a process that neither serves recall nor runs the index stage.

        It never opens the index: an embedded Qdrant Edge shard belongs to
        the read service's process alone.
        """
        await migrate(self.settings.pg_dsn)
        await self.pg.open()
        if with_index:
            dimension = (await self.embedder()).dimension if with_model else 384
            await self.index.ensure(dimension)

    @property
    def keys(self) -> KeyStore:
        """The users' data keys, for the stages that seal or open `memory.changes` (services/archive/changes.py).

        Built on first use, so a process that never touches them (the read
        service, unless it feeds a generation's index) needs no master key. A
        worker writes changes, so it may create `data_dir/master-key` when
        none is configured, as the window stage does: the file is created
        exclusively, two processes racing end with one.
        """
        if self._keys is None:
            self._keys = KeyStore.from_settings(self.pg, self.settings, create_master=True)
        return self._keys

    def open_keys(self) -> KeyStore:
        """`keys`, loaded now: a stage calls it as it registers, so a master key that cannot be loaded stops the
        start (ConfigError) instead of failing its first batch, which would dead-letter good changes."""
        return self.keys

    async def embedder(self) -> Embedder:
        """Loaded once, off the event loop (building the graph takes ~1 s)."""
        async with self._embedder_lock:
            if self._embedder is None:
                s = self.settings
                model: Embedder
                if s.embed_base_url:
                    from services.embedding.openai_embedder import OpenAiEmbedder

                    remote = OpenAiEmbedder(
                        base_url=s.embed_base_url,
                        model=s.embed_model,
                        dimension=s.embed_dimension,
                        api_key=s.llm_api_key,
                        timeout=s.llm_timeout,
                        batch_size=s.embed_batch_size,
                    )
                    await asyncio.to_thread(remote.verify)
                    model = remote
                else:
                    model = await asyncio.to_thread(
                        MiniLmEmbedder,
                        s.embed_model_dir,
                        s.embed_threads,
                        256,
                        s.embed_batch_size,
                        s.embed_quantized,
                    )
                self._embedder = CachedEmbedder(model, s.embed_cache_size)
            return self._embedder

    async def stop(self) -> None:
        await self.pg.close()
        await self.index.close()
        if self.llm is not None:
            await self.llm.close()
