"""The Faust app: topics and every stage agent, built from settings.

Nothing happens at import time; `build_app()` is called from `main()`.
"""

from __future__ import annotations

import faust

import agents.maintenance
from agents import consolidator, embedder, housekeeping, qdrant_sink, summarizer, window
from agents.consolidator import commands as consolidator_commands
from agents.outbox import register_relay
from agents.topics import Topics
from agents.transport import Transport
from services import metrics
from services.config import Settings
from services.runtime import Runtime

STAGES = (window, summarizer, embedder, consolidator, consolidator_commands, qdrant_sink)


def build_app(settings: Settings, runtime: Runtime) -> tuple[faust.App, Topics]:
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        web_enabled=False,
        # Topics come from topics.yaml (memstream topics create), never ad hoc.
        topic_allow_declare=False,
        topic_disable_leader=True,
        broker_commit_interval=settings.commit_interval,
        # Short group timeouts: a killed worker's partitions move on in seconds.
        broker_session_timeout=settings.group_session_timeout,
        broker_heartbeat_interval=1.0,
        broker_rebalance_timeout=settings.group_session_timeout,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        loghandlers=[],
    )
    app.transport = Transport(app.conf.broker_consumer, app, fetch_max_wait_ms=settings.fetch_max_wait_ms)
    topics = Topics.declare(app)
    for stage in STAGES:
        metrics.declare_stage(stage.agent.STAGE)
        stage.agent.register(app, topics, runtime)
    housekeeping.register(app, settings, runtime)
    agents.maintenance.register(app, settings, runtime, topics)
    register_relay(app, runtime, topics.by_name(), settings.outbox_relay_seconds)
    return app, topics
