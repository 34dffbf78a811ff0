"""The summarizer agent with the LLM configured, through Faust's test context, over a fresh Postgres.

Postgres because the LLM path keeps each session's rolling summary there;
no model and no Qdrant are needed by this stage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import faust

from agents.summarizer import agent
from agents.topics import Topics
from services.core.config import Settings
from services.core.topics import BY_ROLE as TOPIC_NAMES
from services.runtime import Runtime
from services.stores.postgres import migrate
from tests.agents.test_agents import Harness, Sink


@asynccontextmanager
async def summarizer_stage(tmp_path: Path, pg_dsn: str, llm_base_url: str) -> AsyncIterator[Callable[[], Harness]]:
    """`build()` gives a fresh app (fresh sinks) over one runtime, so a test can feed a chunk twice."""
    settings = Settings(data_dir=tmp_path, pg_dsn=pg_dsn, llm_base_url=llm_base_url, llm_timeout=2.0, llm_max_retries=0)
    runtime = Runtime.create(settings)
    await migrate(pg_dsn)
    await runtime.pg.open()

    def build() -> Harness:
        app = faust.App("test-summarizer-llm", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
        inbound = app.topic(
            TOPIC_NAMES["evicted"], key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        sinks = {attr: Sink(name) for attr, name in TOPIC_NAMES.items() if attr != "evicted"}
        agent.register(app, Topics(evicted=inbound, **sinks), runtime)
        return Harness(app, agent.STAGE, Topics(evicted=inbound, **sinks), runtime)

    try:
        yield build
    finally:
        await runtime.index.close()
        await runtime.pg.close()
        if runtime.llm is not None:
            await runtime.llm.close()
