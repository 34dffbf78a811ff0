"""Semantic topics on the pattern-detection set: does a theme a user came back to get a topic, and a pure one?

    .venv/bin/python -m tests.bench.topic_set [--half a|b]

Each session of tests/bench/pattern_set.py's users becomes an episode as
the pipeline makes it (tests/bench/patterns.episodes: the summarizer with
the tenant's corpus counts, the consolidator's record), and
agents.maintenance.rules.topics.topics runs over each user's episodes
with the default settings. For every theme with at least three sessions
(one-offs never count) it reports whether some topic is mostly that
theme's sessions (recall), and of the topics: how pure they are (share of
their sessions from their main theme), how much of their theme they cover,
and the topics that match no theme of three sessions or repeat one already
matched (extra). Topics are lexical: a theme worded differently in each
session is the patterns' (embedding clusters') to find, so recall here is
low by design; what it shows is whether topics name what users came back to.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field

from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.topics import topics
from services.core.config import Settings
from services.embedding import Embedder, MiniLmEmbedder
from tests.bench.pattern_set import User, labelled_users
from tests.bench.patterns import episodes

# As the summarizer writes them (Settings.summary_max_sentences).
SUMMARY_SENTENCES = Settings.model_fields["summary_max_sentences"].default
MIN_THEME_SESSIONS = 3


@dataclass
class TopicScore:
    themes: int = 0
    matched: int = 0
    topics: int = 0
    purity: float = 0.0
    coverage: float = 0.0
    extra: Counter[tuple[str, ...]] = field(default_factory=Counter)

    def line(self) -> str:
        return (
            f"themes of >= {MIN_THEME_SESSIONS} sessions {self.themes}, with a topic {self.matched} "
            f"({self.matched / max(self.themes, 1):.2f}); topics {self.topics}, purity "
            f"{self.purity / max(self.topics, 1):.3f}, theme sessions covered {self.coverage / max(self.matched, 1):.3f}; "
            f"extra {sum(self.extra.values())} {sorted(self.extra)[:8]}"
        )


def evaluate(users: list[User], rules: Rules, embedder: Embedder) -> TopicScore:
    score = TopicScore()
    for made in episodes(users, embedder, SUMMARY_SENTENCES):
        user = made.user
        theme_of = {sid: theme for theme, sids in user.themes().items() for sid in sids}
        big = {
            t: sids for t, sids in user.themes().items() if len(sids) >= MIN_THEME_SESSIONS and not t.startswith("one-")
        }
        score.themes += len(big)
        found: set[str] = set()
        for topic in topics(made.records, rules):
            sessions = {r.source.session_id for r in topic.members}
            # Its main theme; a tie goes to the theme first in name order (sets iterate in hash order).
            theme, n = min(Counter(theme_of[s] for s in sessions).items(), key=lambda kv: (-kv[1], kv[0]))
            score.topics += 1
            score.purity += n / len(sessions)
            if theme in big and theme not in found:
                found.add(theme)
                score.coverage += len(sessions & big[theme]) / len(big[theme])
            else:
                score.extra[topic.terms] += 1
        score.matched += len(found)
    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=["a", "b"])
    args = parser.parse_args()
    print(evaluate(labelled_users(args.half), Rules.from_settings(Settings()), MiniLmEmbedder()).line())


if __name__ == "__main__":
    main()
