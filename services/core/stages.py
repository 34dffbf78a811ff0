"""Which stages a worker process runs, under which consumer group, and which timers go with them.

Pure: `memstream worker --stages` is checked here before Faust or any model
is imported, and the rules are testable without a broker.

Each stage is its own consumer group (`<app_id>-<stage>`), so every stage's
partitions spread over exactly the processes that run it, a process joining
or dying rebalances only the stages it runs, and one stage's offsets can be
reset (a replay of that stage alone) without touching the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Pipeline order. The consolidator is one stage with two agents (memory.embedded
# and memory.commands): one group, so Faust gives partition p of both topics, one
# user's candidates and commands, to the same process, and the single writer of
# a user's memory stays single.
STAGE_NAMES = ("window", "summarizer", "embedder", "consolidator", "qdrant_sink")
# The stage that writes the recall index: with the embedded Qdrant Edge shard it
# must run in the read service's process (a shard has one owner).
INDEX_STAGE = "qdrant_sink"
# Each stage's inputs, by the role of the topic: where lag is measured (a rebuild's wait, the ops page).
STAGE_INPUTS = (
    ("window", "archive"),
    ("summarizer", "evicted"),
    ("embedder", "candidates"),
    ("consolidator", "embedded"),
    ("consolidator", "archive"),  # the commands stage: the archive's command records
    ("qdrant_sink", "changes"),
)
# Stages that write the outbox in their transactions (maintenance, which also
# does, runs with the window stage).
OUTBOX_STAGES = ("window", "consolidator")

# Names people reach for that are parts of another stage.
_PART_OF = {
    "rules": "rule extraction runs inline in the window stage",
    "commands": "memory commands are applied by the consolidator stage",
    "maintenance": "maintenance runs with the window stage",
    "archive": "turns are archived by the window stage",
    "sink": "did you mean qdrant_sink?",
    "index": "did you mean qdrant_sink?",
}


class UnknownStage(ValueError):
    """A `--stages` value names no stage: the message says which names exist."""


def parse_stages(text: str) -> tuple[str, ...]:
    """Comma-separated stage names → the stages in pipeline order, each once; `all` means every stage."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if not names:
        raise UnknownStage(f"no stage named; choose from {', '.join(STAGE_NAMES)}")
    if names == ["all"]:
        return STAGE_NAMES
    unknown = [name for name in names if name not in STAGE_NAMES]
    if unknown:
        hints = "".join(f" ({_PART_OF[name]})" for name in unknown if name in _PART_OF)
        raise UnknownStage(
            f"unknown stage{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}{hints}; "
            f"choose from {', '.join(STAGE_NAMES)}, or all"
        )
    return tuple(stage for stage in STAGE_NAMES if stage in names)


def without(stages: Iterable[str], *removed: str) -> tuple[str, ...]:
    return tuple(stage for stage in stages if stage not in removed)


def group_id(app_id: str, stage: str) -> str:
    """The stage's consumer group (and Faust app id): `app_id` prefixes all, so a generation can own its groups."""
    return f"{app_id}-{stage}"


@dataclass(frozen=True)
class TimerPlacement:
    """Which of a process's stages hosts each periodic job; None = not in this process.

    - Consumer lag: every stage, for the partitions its group gave this process.
    - Leader jobs (maintenance, idle-session closing, the memory-count gauges):
      the window stage, and there only on the member that owns partition 0 of
      `chat.turns`, which exactly one process in the fleet does at a time.
      Idle sessions end through `chat.turns`, the window's own input, and the
      counts are fleet totals that the dashboards sum, so one reporter.
    - Outbox relay: once per process that runs a stage writing the outbox
      (window, else consolidator); a row two relays both send is a duplicate
      that every consumer already absorbs (idempotent writes).
    """

    leader: str | None
    relay: str | None


def place_timers(stages: Iterable[str]) -> TimerPlacement:
    chosen = set(stages)
    return TimerPlacement(
        leader="window" if "window" in chosen else None,
        relay=next((stage for stage in OUTBOX_STAGES if stage in chosen), None),
    )
