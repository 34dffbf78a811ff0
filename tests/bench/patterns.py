"""Precision and recall of pattern detection on the labelled set (tests/bench/pattern_set.py).

    .venv/bin/python -m tests.bench.patterns [--sweep]

Each labelled session goes the pipeline's way: the session's turns are one
chunk, the summarizer's extractive episode (agents/summarizer: `summarize`
weighing words against the tenant's corpus counts, here those of the whole
set, then `candidate_for`), its MiniLM vector (int8, the pipeline's default),
the consolidator's new record;
then one maintenance pass (agents/maintenance/rules/plan.plan_user) over each
user's episodes, and its `pattern` memories are compared with the labels.

- pairs: two sessions in one found pattern are a true pair when they share a
  theme. Precision = true found pairs / found pairs; recall = true found
  pairs / the pairs of the themes that should be patterns (at least
  `pattern_min` sessions).
- patterns: a found pattern matches an expected one (a theme of at least
  `pattern_min` sessions) when their sessions overlap by Jaccard ≥ 0.5.
  Precision = matching found / found; recall = matched expected / expected.

The last lines replay each user's history with a pass the day after each
session, as a daily maintenance sees it grow: a theme the user keeps
coming back to should be one pattern, grown, not one per few sessions.

Printed per half of the set (the halves share no text): "a" is where the
method and thresholds were chosen, "b" confirms them. `--sweep` adds the
alternatives that were measured, best pair F0.5 on half a first (precision
weighs more: a wrong pattern takes unrelated episodes out of default recall).

A guard the labelled set cannot give: a history whose episodes are all alike
without one theme. LoCoMo's conversations are that (two friends, the same
names and small talk in every session), so each variant also prints the
share of LoCoMo dev episodes (cut in 10-turn chunks, about what the window
evicts) that its patterns take, and the share of the largest pattern: a
fixed cosine threshold makes nearly a whole conversation one pattern. The
default is the variant with the best F0.5 on half a whose largest LoCoMo
pattern stays under a third of a conversation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import combinations
from pathlib import Path

from agents.consolidator.apply.records import new_record
from agents.corpus import corpus_counts
from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.plan import plan_user
from agents.maintenance.rules.synthesized import covered
from agents.summarizer.candidates import EXTRACTOR, candidate_for
from agents.summarizer.extractive import summarize
from agents.summarizer.salience import Salience
from schemas import EmbeddedCandidate, EvictedChunk, MemoryRecord, MemoryStatus, MemoryType, Role, TurnEvent
from services.core.config import Settings
from services.embedding import Embedder, MiniLmEmbedder
from tests.bench.pattern_set import TENANT, LabelledSession, User, labelled_users

Pair = tuple[str, str]
MATCH_JACCARD = 0.5
LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo_dev.json"
LOCOMO_CHUNK = 10
LOCOMO_SESSION = re.compile(r"session_\d+")
LOCOMO_T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class UserEpisodes:
    """One user's episodes as maintenance sees them, and the theme of each one's session."""

    user: User
    records: list[MemoryRecord]
    vectors: dict[str, list[float] | None]
    theme: dict[str, str]  # record id -> theme label


def tenant_salience(users: Sequence[User]) -> Salience:
    """The corpus counts the window stage keeps for a tenant whose history is these users' sessions."""
    return Salience(corpus_counts(t for u in users for s in u.sessions for t in s.turns))


def episodes(users: Sequence[User], embedder: Embedder, max_sentences: int) -> list[UserEpisodes]:
    """Every labelled session through the summarizer, the embedder and the consolidator's record.

    The summarizer weighs words against the counts of the users' whole tenant
    (all of `users`), as a tenant with that history has them.
    """
    salience = tenant_salience(users)
    candidates = []
    for u in users:
        for s in u.sessions:
            chunk = EvictedChunk(
                tenant_id=TENANT,
                user_id=u.user_id,
                session_id=s.session_id,
                reason="session_end",
                turns=list(s.turns),
                cause=[],
            )
            if (episode := summarize(chunk.turns, max_sentences, salience)) is not None:
                candidates.append((u, s.theme, candidate_for(chunk, episode, EXTRACTOR)))
    vectors = embedder.embed([c.text for _, _, c in candidates])
    by_user: dict[str, UserEpisodes] = {u.user_id: UserEpisodes(u, [], {}, {}) for u in users}
    for (u, theme, candidate), vector in zip(candidates, vectors, strict=True):
        embedded = EmbeddedCandidate(
            tenant_id=candidate.tenant_id, user_id=candidate.user_id, candidate=candidate, vector=vector, model="bench"
        )
        record = new_record(embedded, candidate.candidate_id, candidate.observed_at)
        found = by_user[u.user_id]
        found.records.append(record)
        found.vectors[record.id] = vector
        found.theme[record.id] = theme
    return list(by_user.values())


def found_patterns(user: UserEpisodes, rules: Rules) -> list[set[str]]:
    """The member ids of every pattern one maintenance pass makes of the user's episodes."""
    now = max(r.observed_at for r in user.records) + timedelta(days=1)
    effects, _ = plan_user(user.records, user.vectors, set(), now, rules)
    return [covered(e.record) for e in effects if e.record.type is MemoryType.PATTERN]


def incremental_patterns(user: UserEpisodes, rules: Rules) -> list[set[str]]:
    """The member ids of the user's active patterns after a pass the day after each session, as a daily
    maintenance sees a history grow (one pass over the whole history is `found_patterns`)."""
    rows: dict[str, MemoryRecord] = {}
    vectors = dict(user.vectors)
    taken: set[str] = set()
    by_session: dict[str, list[MemoryRecord]] = {}
    for r in sorted(user.records, key=lambda r: (r.observed_at, r.id)):
        by_session.setdefault(r.source.session_id, []).append(r)
    for arrived in by_session.values():
        rows.update({r.id: r for r in arrived})
        now = max(r.observed_at for r in arrived) + timedelta(days=1)
        active = [r for r in rows.values() if r.status is MemoryStatus.ACTIVE]
        effects, _ = plan_user(active, vectors, taken, now, rules)
        for e in effects:
            rows[e.record.id] = e.record
            if e.vector is not None:
                vectors[e.record.id] = e.vector
            if e.record.type is MemoryType.PATTERN:
                taken.add(e.record.id)
    return [covered(r) for r in rows.values() if r.type is MemoryType.PATTERN and r.status is MemoryStatus.ACTIVE]


def pairs(groups: Iterable[Iterable[str]]) -> set[Pair]:
    return {(a, b) for g in groups for a, b in combinations(sorted(g), 2)}


@dataclass
class Score:
    found_pairs: int = 0
    true_pairs: int = 0
    expected_pairs: int = 0
    recalled_pairs: int = 0
    found: int = 0
    found_matching: int = 0
    expected: int = 0
    expected_matched: int = 0

    def add(self, other: Score) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @staticmethod
    def ratio(a: int, b: int) -> float:
        return a / b if b else 1.0

    @property
    def pair_precision(self) -> float:
        return self.ratio(self.true_pairs, self.found_pairs)

    @property
    def pair_recall(self) -> float:
        return self.ratio(self.recalled_pairs, self.expected_pairs)

    @property
    def f_half(self) -> float:
        """Pair F0.5: precision weighs more, a wrong pattern hides unrelated episodes from default recall."""
        p, r = self.pair_precision, self.pair_recall
        return 1.25 * p * r / (0.25 * p + r) if p + r else 0.0

    @property
    def pattern_precision(self) -> float:
        return self.ratio(self.found_matching, self.found)

    @property
    def pattern_recall(self) -> float:
        return self.ratio(self.expected_matched, self.expected)

    def line(self) -> str:
        return (
            f"pairs P {self.pair_precision:.3f} R {self.pair_recall:.3f} | "
            f"patterns P {self.pattern_precision:.3f} R {self.pattern_recall:.3f} "
            f"({self.found_matching}/{self.found} found match, {self.expected_matched}/{self.expected} expected found)"
        )


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b)


def score(found: Sequence[set[str]], theme: dict[str, str], pattern_min: int) -> Score:
    """One user's found patterns against the themes of its episodes."""
    by_theme: dict[str, set[str]] = {}
    for record_id, label in theme.items():
        by_theme.setdefault(label, set()).add(record_id)
    expected = [g for label, g in by_theme.items() if not label.startswith("one-off") and len(g) >= pattern_min]
    same_theme = pairs(by_theme.values())
    found_pairs, expected_pairs = pairs(found), pairs(expected)
    return Score(
        found_pairs=len(found_pairs),
        true_pairs=len(found_pairs & same_theme),
        expected_pairs=len(expected_pairs),
        recalled_pairs=len(found_pairs & expected_pairs),
        found=len(found),
        found_matching=sum(any(jaccard(f, g) >= MATCH_JACCARD for g in expected) for f in found),
        expected=len(expected),
        expected_matched=sum(any(jaccard(f, g) >= MATCH_JACCARD for f in found) for g in expected),
    )


def evaluate(users: Sequence[UserEpisodes], rules: Rules, daily: bool = False) -> Score:
    """One pass over each user's history, or (`daily`) a pass after each of its sessions."""
    total = Score()
    for u in users:
        found = incremental_patterns(u, rules) if daily else found_patterns(u, rules)
        total.add(score(found, u.theme, rules.pattern_min))
    return total


def labelled_episodes(half: str | None = None) -> list[UserEpisodes]:
    """The set's users (one half, or both) as episodes, the pipeline's way with its default settings."""
    settings = Settings()
    return episodes(labelled_users(half), MiniLmEmbedder(quantized=True), settings.summary_max_sentences)


def locomo_users(path: Path, chunk_turns: int = LOCOMO_CHUNK) -> list[User]:
    """LoCoMo's conversations as users with unlabelled sessions, cut in chunks of `chunk_turns` turns.

    About what the window evicts (20 turns, trimmed to half) plus the session's
    remainder at its end. Speaker a is the user.
    """
    users = []
    for sample in json.loads(path.read_text()):
        conversation, sample_id = sample["conversation"], sample["sample_id"]
        sessions = []
        for key in sorted((k for k in conversation if LOCOMO_SESSION.fullmatch(k)), key=lambda k: int(k[8:])):
            turns = [
                TurnEvent(
                    event_id=f"{sample_id}-{t['dia_id'].replace(':', '-')}",
                    tenant_id=TENANT,
                    user_id=sample_id,
                    session_id=key,
                    turn_index=i,
                    role=Role.USER if t["speaker"] == conversation["speaker_a"] else Role.ASSISTANT,
                    content=t["text"],
                    ts=LOCOMO_T0 + timedelta(days=int(key[8:]), seconds=30 * i),
                )
                for i, t in enumerate(conversation[key])
            ]
            for start in range(0, len(turns), chunk_turns):
                chunk = tuple(turns[start : start + chunk_turns])
                sessions.append(LabelledSession(key, f"one-off:{key}:{start}", chunk))
        users.append(User(sample_id, "locomo", tuple(sessions)))
    return users


def collapse(users: Sequence[UserEpisodes], rules: Rules) -> tuple[float, float]:
    """Over unlabelled conversations: the mean share of episodes put in patterns, and of the largest pattern."""
    shares, largest = [], []
    for u in users:
        found = found_patterns(u, rules)
        shares.append(sum(len(f) for f in found) / len(u.records))
        largest.append(max((len(f) for f in found), default=0) / len(u.records))
    return sum(shares) / len(shares), sum(largest) / len(largest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sweep", action="store_true", help="also print the alternatives measured, best on half a first"
    )
    parser.add_argument("--locomo", type=Path, default=LOCOMO, help="LoCoMo conversations for the collapse guard")
    args = parser.parse_args()
    settings = Settings()
    model = MiniLmEmbedder(quantized=True)
    halves = {h: episodes(labelled_users(h), model, settings.summary_max_sentences) for h in ("a", "b")}
    locomo = episodes(locomo_users(args.locomo), model, settings.summary_max_sentences) if args.locomo.exists() else []
    rules = Rules.from_settings(settings)
    variants = [("default", rules), *(sweep(rules) if args.sweep else [])]
    measured = [
        (name, {h: evaluate(users, variant) for h, users in halves.items()}, variant) for name, variant in variants
    ]
    measured[1:] = sorted(measured[1:], key=lambda m: -m[1]["a"].f_half)
    for name, scores, variant in measured:
        if locomo:
            in_patterns, largest = collapse(locomo, variant)
            print(f"{name}: LoCoMo episodes in patterns {in_patterns:.2f}, in the largest {largest:.2f}")
        else:
            print(f"{name}: (no LoCoMo data at {args.locomo})")
        for half, score in scores.items():
            print(f"  half {half}: F0.5 {score.f_half:.3f} {score.line()}")
    # A pass after every session: a theme the user keeps coming back to should stay one pattern.
    for half, users in halves.items():
        daily = evaluate(users, rules, daily=True)
        print(f"default, a pass after each session: half {half}: F0.5 {daily.f_half:.3f} {daily.line()}")


def sweep(rules: Rules) -> list[tuple[str, Rules]]:
    """Spread (how far above the user's typical pair) × prior pairs (how much a short history leans on the prior) × minimum."""
    return [
        (
            f"spread {k} prior {n0} min {m}",
            dataclasses.replace(rules, pattern_spread=k, pattern_prior_pairs=n0, pattern_min=m),
        )
        for k in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
        for n0 in (0.0, 10.0, 25.0, 50.0, 100.0, 200.0, 1e6)
        for m in (3, 4, 5)
    ]


if __name__ == "__main__":
    main()
