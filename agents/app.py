"""The Faust apps: one per stage, each its own consumer group, built from settings.

Faust takes the consumer group from the app id, for every agent of an app;
it has no per-agent group (one group for some agents and not others takes
one app per group). So each stage is an app of its own, `<app_id>-<stage>`,
and a process runs the apps of the stages it was given side by side in one
Faust worker and one event loop, sharing the process's stores and model.
Nothing happens at import time; `build_apps()` is called from `main()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import faust

import agents.maintenance
from agents import consolidator, embedder, housekeeping, qdrant_sink, summarizer, window
from agents.consolidator import commands as consolidator_commands
from agents.maintenance.timers import is_leader, leader_topic
from agents.outbox import register_relay
from agents.topics import Topics
from agents.transport import Transport
from services.core import generations, metrics
from services.core.config import Settings
from services.core.kafka_auth import faust_credentials
from services.core.stages import STAGE_NAMES, group_id, place_timers
from services.runtime import Runtime

PRODUCER_BATCH_BYTES = 512 * 1024

# Each stage's agents (modules with an `agent` that registers them), by stage name.
STAGES: dict[str, tuple[ModuleType, ...]] = {
    "window": (window,),
    "summarizer": (summarizer,),
    "embedder": (embedder,),
    "consolidator": (consolidator, consolidator_commands),
    "qdrant_sink": (qdrant_sink,),
}


@dataclass(frozen=True)
class StageApp:
    stage: str
    app: faust.App
    topics: Topics


def stage_app(settings: Settings, stage: str) -> faust.App:
    app = faust.App(
        group_id(settings.app_id, stage),
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=faust_credentials(settings),
        store="memory://",
        # Faust's directories (unused with memory stores) under the data dir, not the working directory.
        datadir=settings.data_dir / "faust" / stage,
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
        # aiokafka's 16 KiB default holds two memory.changes messages: a 256-change batch became
        # ~128 produce batches, each an object in the embedded log. Under the broker's message limit.
        producer_max_batch_size=PRODUCER_BATCH_BYTES,
        consumer_auto_offset_reset="earliest",
        stream_wait_empty=False,
        loghandlers=[],
    )
    app.transport = Transport(app.conf.broker_consumer, app, fetch_max_wait_ms=settings.fetch_max_wait_ms)
    return app


def build_apps(settings: Settings, runtime: Runtime, stages: Sequence[str] = STAGE_NAMES) -> list[StageApp]:
    """One app per stage, in pipeline order, with the process's timers placed by `services.core.stages.place_timers`."""
    built: dict[str, StageApp] = {}
    for stage in stages:
        app = stage_app(settings, stage)
        topics = Topics.declare(app, generations.of(settings).topics())
        for module in STAGES[stage]:
            metrics.declare_stage(module.agent.STAGE)
            module.agent.register(app, topics, runtime)
        housekeeping.register_lag(app, settings, stage)
        built[stage] = StageApp(stage, app, topics)
    placement = place_timers(stages)
    if placement.leader is not None:
        leader = built[placement.leader]
        agents.maintenance.register(leader.app, settings, runtime, leader.topics)
        housekeeping.register_counts(
            leader.app, settings, runtime, lambda: is_leader(leader.app, leader_topic(settings))
        )
    if placement.relay is not None:
        relay = built[placement.relay]
        register_relay(relay.app, runtime, relay.topics.by_name(), settings.outbox_relay_seconds)
    return list(built.values())
