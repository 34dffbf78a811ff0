"""Precision and recall of open-question detection on a labelled set of assistant-style conversations.

    .venv/bin/python -m tests.bench.questions [--data PATH] [--split SPLIT] [--misses]

Each line of the set (tests/unit/data/open_questions.jsonl) is one evicted
chunk: `turns` ([role, text] pairs), `reason` (`session_end` or `trimmed`)
and `open`, the user sentences a person would note as still open. A
detection is one (case, question text) pair, so precision is the share of
detected questions that are labelled open and recall the share of labelled
questions detected. `kind` says what the case exercises (answered, deferred,
deflected, ...); the table prints the misses and false alarms per kind.
`split` says when a case was written: `dev` cases before the rules were
designed; `heldout` to `heldout6` each after the rules were frozen,
measured once on them, and only then used to adjust the rules; `scenario`
cases come from conversations run through the stack as a user would. So
today every split has been seen; the held-out figures at the time of each
freeze are in the commit messages.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agents.questions import question_candidates
from agents.rules.extract import sentences
from schemas import EvictedChunk, Role, TurnEvent

DATA = Path(__file__).resolve().parents[1] / "unit" / "data" / "open_questions.jsonl"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    split: str
    chunk: EvictedChunk
    expected: frozenset[str]


@dataclass
class Score:
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    # (case id, kind, question) of each false alarm and each miss
    false_alarms: list[tuple[str, str, str]] = field(default_factory=list)
    misses: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        labelled = self.true_positives + self.false_negatives
        return self.true_positives / labelled if labelled else 1.0


def case_from(row: dict[str, Any]) -> Case:
    """A labelled line as an evicted chunk; each `open` text must be one of a user turn's sentences."""
    turns = [
        TurnEvent(
            event_id=f"{row['id']}-{i}",
            tenant_id="t",
            user_id="u",
            session_id=row["id"],
            turn_index=i,
            role=Role(role),
            content=text,
            ts=T0 + timedelta(seconds=30 * i),
        )
        for i, (role, text) in enumerate(row["turns"])
    ]
    said = {s for t in turns if t.role is Role.USER for s in sentences(t.content)}
    unknown = set(row["open"]) - said
    if unknown:
        raise ValueError(f"{row['id']}: labelled questions that are no user sentence: {sorted(unknown)}")
    chunk = EvictedChunk(
        tenant_id="t", user_id="u", session_id=row["id"], reason=row["reason"], turns=turns, cause=[turns[0].event_id]
    )
    return Case(row["id"], row["kind"], row["split"], chunk, frozenset(row["open"]))


def load(path: Path = DATA, split: str | None = None) -> list[Case]:
    lines = path.read_text().splitlines()
    cases = [case_from(json.loads(line)) for line in lines if line.strip()]
    return [c for c in cases if split is None or c.split == split]


def detected(chunk: EvictedChunk) -> set[str]:
    """The questions the detector records as open for one chunk (its last sentence: a memory may lead in)."""
    return {sentences(c.text)[-1] for c in question_candidates(chunk)}


def evaluate(cases: Iterable[Case], detect: Callable[[EvictedChunk], set[str]] = detected) -> Score:
    score = Score()
    for case in cases:
        found = detect(case.chunk)
        score.true_positives += len(found & case.expected)
        score.false_positives += len(found - case.expected)
        score.false_negatives += len(case.expected - found)
        score.false_alarms += [(case.id, case.kind, q) for q in sorted(found - case.expected)]
        score.misses += [(case.id, case.kind, q) for q in sorted(case.expected - found)]
    return score


def report(cases: list[Case], score: Score, misses: bool) -> str:
    kinds = Counter(c.kind for c in cases)
    labelled = Counter(c.kind for c in cases for _ in c.expected)
    alarms = Counter(kind for _, kind, _ in score.false_alarms)
    missed = Counter(kind for _, kind, _ in score.misses)
    lines = [f"{'kind':<20}{'cases':>6}{'open':>6}{'missed':>8}{'false':>7}"]
    lines += [f"{k:<20}{kinds[k]:>6}{labelled[k]:>6}{missed[k]:>8}{alarms[k]:>7}" for k in sorted(kinds)]
    lines.append(
        f"{len(cases)} cases, {sum(labelled.values())} open questions: "
        f"precision {score.precision:.3f}, recall {score.recall:.3f} "
        f"(tp {score.true_positives}, fp {score.false_positives}, fn {score.false_negatives})"
    )
    if misses:
        lines += [f"  missed  {i} [{k}] {q}" for i, k, q in score.misses]
        lines += [f"  false   {i} [{k}] {q}" for i, k, q in score.false_alarms]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--split", default=None, help="one split: dev, heldout, heldout2 (default: each, then all)")
    parser.add_argument("--misses", action="store_true", help="list every miss and false alarm")
    args = parser.parse_args()
    everything = load(args.data)
    splits = [args.split] if args.split else [*sorted({c.split for c in everything}), "all"]
    for split in splits:
        cases = everything if split == "all" else [c for c in everything if c.split == split]
        print(f"== {split}")
        print(report(cases, evaluate(cases), args.misses))


if __name__ == "__main__":
    main()
