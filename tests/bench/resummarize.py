"""The replay's own LoCoMo chunks summarized again by today's summarizer: coverage before and after, in seconds.

    python -m tests.bench.resummarize [--rows FILE] [--data PATH] [--write FILE]

`make bench-locomo` measures episodes after a 15-minute replay. A change to
the extractive summarizer (agents/summarizer/extractive.py) only changes
what each chunk becomes, so this takes the episodes a replay stored
(`python -m tests.bench.locomo_tune ingest` keeps them, with their
provenance: the `dia_id` of every turn they were made from), rebuilds each
chunk from the dataset's turns as the bench sent them (`locomo.to_events`),
summarizes it again, and prints the coverage of the reference summaries of
the stored episodes and of the new ones. `--write` also saves the rows with
the new episodes, embedded by the model the pipeline runs, for
`python -m tests.bench.locomo_tune grid --rows FILE` (recall on them).

What it cannot see: the tenant's assistant-turn counts (LoCoMo has no
assistant turns, so the replay had none either) and the chunking itself
(the same chunks, by construction).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.summarizer.extractive import summarize
from schemas import MemoryRecord, MemoryType, TurnEvent
from services.core.config import Settings
from services.embedding import MiniLmEmbedder
from tests.bench import locomo
from tests.bench.coverage import Episode, format_coverage
from tests.bench.locomo_tune import DEFAULT_ROWS


def turns_by_dia(samples: list[dict[str, Any]], users: Mapping[str, str]) -> dict[tuple[str, str], TurnEvent]:
    """Every turn as the bench produced it, by (user, dia_id)."""
    out = {}
    for sample in samples:
        user = users[sample["sample_id"]]
        for event in locomo.to_events(sample, user):
            if event.get("type", "turn") == "turn" and (dia := event.get("metadata", {}).get("dia_id")):
                out[(user, dia)] = TurnEvent.model_validate(event)
    return out


def chunk_of(record: MemoryRecord, turns: Mapping[tuple[str, str], TurnEvent]) -> list[TurnEvent]:
    """The turns an episode was made from, in order, from its provenance."""
    dias = [m.get("dia_id") for m in record.source.metadata if isinstance(m, dict)]
    return [turns[(record.user_id, d)] for d in dias if (record.user_id, d) in turns]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS)
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--write", type=Path, help="rows with the new episodes, re-embedded, for the grid")
    args = parser.parse_args()
    samples = json.loads(args.data.read_text())
    head, *rows = json.loads(args.rows.read_text())
    users: dict[str, str] = head["users"]
    sample_of = {user: sid for sid, user in users.items()}
    turns = turns_by_dia(samples, users)
    settings = Settings()
    stored: dict[str, list[Episode]] = defaultdict(list)
    again: dict[str, list[Episode]] = defaultdict(list)
    changed: list[dict[str, Any]] = []
    for row in rows:
        record = MemoryRecord.model_validate(row["record"])
        if record.type is not MemoryType.EPISODE:
            continue
        provenance = record.source.model_dump(mode="json")
        stored[sample_of[record.user_id]].append(Episode(record.text, provenance))
        chunk = chunk_of(record, turns)
        episode = summarize(chunk, settings.summary_max_sentences) if chunk else None
        if episode is not None:
            again[sample_of[record.user_id]].append(Episode(episode.text, provenance))
            row["record"]["text"] = episode.text
            changed.append(row)
    for name, episodes in (("stored", stored), ("summarized again", again)):
        print(f"{name}: {format_coverage(locomo.episode_coverage(samples, episodes)[1])}")
    if args.write:
        model = MiniLmEmbedder(None, settings.embed_threads, 256, settings.embed_batch_size, settings.embed_quantized)
        indexed = [r for r in changed if r["vector"]]  # a row without a vector is not in the index either
        for row, vector in zip(indexed, model.embed([r["record"]["text"] for r in indexed]), strict=True):
            row["vector"] = [float(x) for x in vector]
        args.write.write_text(json.dumps([head, *rows]))
        print(f"{len(changed)} episodes written again to {args.write}")


if __name__ == "__main__":
    main()
