"""Generations: memory derived again, side by side with the memory that serves.

A generation is one complete derivation of memory from the log, with names
of its own so two can run at once without touching each other:

- Postgres: schema `g_<name>` holding the derived tables (memories, turns,
  sessions, session summaries, applied commands, outbox); connections of
  the generation put it first on their `search_path` (in the DSN, so the
  pool, migrations and every one-off connection agree) with `public` after
  it, where the shared tables stay: API keys, users' data keys, the
  generations registry;
- Kafka: its own consumer groups (`<app_id>.g-<name>-<stage>`) and its own
  intermediate topics (`memory.evicted.g-<name>`, ... `memory.changes.g-<name>`);
  its input is the shared `memory.archive`, read by its own window group
  (turns, session ends) and its own consolidator group (the commands users gave,
  sealed there as the default applied them: delete, correct, forget, ...),
  never the short-lived `memory.commands`. `memory.dlq` is shared: the dead
  letters name the topic they came from;
- the index: collection `<collection>.g-<name>` on a Qdrant server, or a
  shard directory of its own, `data_dir/generations/<name>/qdrant`.

The default generation is today's memory under today's names: the public
schema, `memstream-<stage>` groups, the plain topic names, the `memories`
collection and `data_dir/qdrant`. Nothing changes for an install that never
makes another.

The serving generation is recorded in `public.generations` (one row per
generation other than the default; at most one row `serving`, and none
means the default serves). The table is created on first use, here, not
by a numbered migration: it is the one table every generation shares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from services.core import topics as names
from services.core.config import Settings

DEFAULT = "default"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,29}$")
# The derived tables: what a generation re-creates from the log. Every other table stays shared in `public`.
DERIVED_TABLES = (
    "applied_commands",
    "corpus_counts",
    "memories",
    "memory_centroids",
    "outbox",
    "session_summaries",
    "sessions",
    "turns",
)
# Shared tables that name users; a test holds DERIVED_TABLES + SHARED_TABLES to every table the migrations make.
SHARED_TABLES = ("api_keys", "user_keys", "generations", "schema_migrations")
# Roles whose topic a generation has to itself (services/core/topics.py names the roles).
# Not `turns`: a generation reads memory.archive (agents/window/archived.py) and writes no turns.
OWN_TOPIC_ROLES = ("evicted", "candidates", "embedded", "changes")
REGISTRY_LOCK = 7_351_010

State = Literal["building", "ready", "serving", "retired"]


class GenerationError(ValueError):
    """A name that cannot be a generation, or an operation its state does not allow; the message says which."""


def check_name(name: str) -> str:
    if name == DEFAULT or not NAME_PATTERN.match(name):
        raise GenerationError(
            f"generation name {name!r}: 1-30 characters, lowercase letters, digits and _, starting with a letter,"
            f" and not {DEFAULT!r}"
        )
    return name


@dataclass(frozen=True)
class Generation:
    """Every name one generation goes by (see the module doc)."""

    name: str

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT

    @property
    def schema(self) -> str:
        return "public" if self.is_default else f"g_{self.name}"

    @property
    def suffix(self) -> str:
        return "" if self.is_default else f".g-{self.name}"

    def topic(self, role: str) -> str:
        base = names.BY_ROLE[role]
        return base + self.suffix if role in OWN_TOPIC_ROLES else base

    def topics(self) -> dict[str, str]:
        """Role → Kafka topic name, for every role."""
        return {role: self.topic(role) for role in names.BY_ROLE}

    def own_topics(self) -> dict[str, str]:
        """Base name → this generation's name, for the topics it has to itself (none for the default)."""
        return {} if self.is_default else {names.BY_ROLE[r]: self.topic(r) for r in OWN_TOPIC_ROLES}

    def app_id(self, base: str) -> str:
        return base + self.suffix

    def collection(self, base: str) -> str:
        return base + self.suffix

    def shard_dir(self, data_dir: Path) -> Path:
        return data_dir / "qdrant" if self.is_default else data_dir / "generations" / self.name / "qdrant"

    def dsn(self, dsn: str) -> str:
        """`dsn` with this generation's schema first on the search path (the default's: unchanged)."""
        if self.is_default:
            return dsn
        options = str(conninfo_to_dict(dsn).get("options", ""))
        return make_conninfo(dsn, options=f"{options} -c search_path={self.schema},public".strip())


def of(settings: Settings) -> Generation:
    return Generation(settings.generation or DEFAULT)


def scoped(settings: Settings, name: str | None = None) -> Settings:
    """The settings of a process running in generation `name` (default: MEMSTREAM_GENERATION, if set).

    Applying it twice changes nothing; the default generation's settings are returned as they are.
    """
    target = name or settings.generation or DEFAULT
    if target == DEFAULT:
        if settings.generation not in (None, DEFAULT):
            raise GenerationError(f"settings of generation {settings.generation} cannot run as the default")
        return settings
    gen = Generation(check_name(target))
    if settings.generation not in (None, gen.name):
        raise GenerationError(f"settings of generation {settings.generation} cannot run as {gen.name}")
    if settings.generation == gen.name and settings.app_id.endswith(gen.suffix):
        return settings  # scoped already
    return settings.model_copy(
        update={
            "generation": gen.name,
            "app_id": gen.app_id(settings.app_id),
            "pg_dsn": gen.dsn(settings.pg_dsn),
            "qdrant_collection": gen.collection(settings.qdrant_collection),
            "qdrant_dir": gen.shard_dir(settings.shard_root),
        }
    )
