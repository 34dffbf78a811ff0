"""The Faust topic handles every agent is wired to (raw bytes: we parse and validate ourselves)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust

from services import topics as names


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
    def declare(cls, app: faust.App) -> Topics:
        def raw(name: str) -> Any:
            return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")

        return cls(**{role: raw(name) for role, name in names.BY_ROLE.items()})

    def by_name(self) -> dict[str, Any]:
        """Handles by Kafka topic name, for messages that carry their destination (the outbox)."""
        return {name: getattr(self, role) for role, name in names.BY_ROLE.items()}
