"""The Faust topic handles every agent is wired to (raw bytes: we parse and validate ourselves)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faust

from services.core import topics as names


@dataclass
class Topics:
    turns: Any
    evicted: Any
    candidates: Any
    embedded: Any
    commands: Any
    changes: Any
    dlq: Any
    archive: Any

    @classmethod
    def declare(cls, app: faust.App, kafka_names: Mapping[str, str] = names.BY_ROLE) -> Topics:
        """`kafka_names`: role → topic, where a generation's differ (services.core.generations.Generation.topics)."""

        def raw(name: str) -> Any:
            return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

        return cls(**{role: raw(kafka_names[role]) for role in names.BY_ROLE})

    def by_name(self) -> dict[str, Any]:
        """Handles by the base topic name a message carries (the outbox): a generation's own topic for its own."""
        return {name: getattr(self, role) for role, name in names.BY_ROLE.items()}
