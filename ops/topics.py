"""Create topics from topics.yaml; existing topics are left as they are."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


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


async def create_topics(bootstrap: str, specs: list[TopicSpec]) -> list[str]:
    """Returns the names it created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            await admin.create_topics(
                [
                    NewTopic(
                        s.name, s.partitions, s.replication_factor, topic_configs={"retention.ms": str(s.retention_ms)}
                    )
                    for s in missing
                ]
            )
        return [s.name for s in missing]
    finally:
        await admin.close()
