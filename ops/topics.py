"""Create topics from topics.yaml; existing topics are left as they are."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int
    key: str


def load_specs(path: Path) -> list[TopicSpec]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    replication = int(doc.get("defaults", {}).get("replication_factor", 1))
    return [
        TopicSpec(
            name,
            int(t["partitions"]),
            int(t.get("replication_factor", replication)),
            int(t["retention_ms"]),
            str(t["key"]),
        )
        for name, t in doc["topics"].items()
    ]


ADMIN_TIMEOUT = 30.0


async def create_topics(bootstrap: str, specs: list[TopicSpec], config: Mapping[str, str] | None = None) -> list[str]:
    """Returns the names it created; a topic another admin created meanwhile counts as existing.

    confluent-kafka's AdminClient is synchronous (futures of its own): it
    runs in a worker thread, so an event loop calling this keeps running.
    `config`: further librdkafka settings (SASL: services.core.kafka_auth.confluent_config).
    """
    return await asyncio.to_thread(_create_missing, bootstrap, specs, dict(config or {}), ADMIN_TIMEOUT)


def _create_missing(bootstrap: str, specs: list[TopicSpec], config: dict[str, str], timeout: float) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **config}, logger=logging.getLogger("librdkafka"))
    existing = set(admin.list_topics(timeout=timeout).topics)
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(s.name, s.partitions, s.replication_factor, config={"retention.ms": str(s.retention_ms)})
            for s in missing
        ],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return sorted(created, key=[s.name for s in missing].index)
