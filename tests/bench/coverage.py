"""Episode coverage of LoCoMo's reference session summaries: a yardstick from outside.

LoCoMo ships a human-style summary of every session (`session_summary`,
keys `session_N_summary`). Coverage is the share of a reference summary's
content words that the episodes memstream made from that session contain,
compared as Snowball (Porter2) English stems, so "painted" in the reference
meets "painting" in an episode. Content words are `services.core.textutil.content_words`:
the stopwords the summarizer itself ignores.

Coverage alone rewards length: an episode that copied the whole session
would score near 1. The mean episode length in tokens (and the tokens per
session) is reported beside it so that coverage bought by length shows.

Pure functions only; `tests/bench/locomo.py` reads the episodes from
Postgres and writes them with these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import Stemmer  # type: ignore[import-not-found]  # PyStemmer: already a dependency, ships no type hints

from services.core.textutil import content_words, count_tokens

_SUMMARY_KEY = re.compile(r"session_(\d+)_summary")
_DIA = re.compile(r"D:?(\d+):(\d+)")
_SESSION_ID = re.compile(r"-s(\d+)$")


@cache
def _stemmer() -> Any:
    return Stemmer.Stemmer("english")


def stems(text: str) -> set[str]:
    """The distinct stems of `text`'s content words (stopwords out, lower-cased)."""
    return set(_stemmer().stemWords(content_words(text)))


def covered(reference: str, texts: Iterable[str]) -> tuple[int, int]:
    """(reference stems found in `texts`, reference stems): the two counts coverage is the ratio of."""
    wanted = stems(reference)
    found: set[str] = set()
    for text in texts:
        found |= stems(text)
    return len(wanted & found), len(wanted)


def reference_summaries(sample: Mapping[str, Any]) -> dict[int, str]:
    """A LoCoMo sample's reference summaries by session number (`session_3_summary` -> 3)."""
    return {
        int(m.group(1)): text
        for key, text in (sample.get("session_summary") or {}).items()
        if (m := _SUMMARY_KEY.fullmatch(key)) and isinstance(text, str) and text.strip()
    }


@dataclass(frozen=True)
class Episode:
    """An episode as stored: its text and its provenance (`session_id`, `event_ids`, `metadata`)."""

    text: str
    source: Mapping[str, Any]

    def turns(self) -> list[tuple[int, int]]:
        """(session, turn) of every LoCoMo turn it was made from, from the turns' `dia_id`s."""
        out = []
        for meta in self.source.get("metadata") or []:
            if isinstance(meta, Mapping) and (m := _DIA.fullmatch(str(meta.get("dia_id", "")))):
                out.append((int(m.group(1)), int(m.group(2))))
        return out

    def sessions(self) -> set[int]:
        """The LoCoMo sessions it covers: those of its turns, else the one its `session_id` names."""
        found = {session for session, _ in self.turns()}
        if not found and (m := _SESSION_ID.search(str(self.source.get("session_id", "")))):
            found.add(int(m.group(1)))
        return found


def session_lines(sample_id: str, numbers: Iterable[int], episodes: Sequence[Episode]) -> list[dict[str, Any]]:
    """One line per session of the conversation: `sample_id`, `session`, `episodes` (texts, in turn order).

    An episode whose turns span two sessions is listed under both; a session
    no episode came from gets an empty list (it still counts, as coverage 0).
    """
    ordered = sorted(episodes, key=lambda e: min(e.turns(), default=(0, 0)))
    return [
        {"sample_id": sample_id, "session": n, "episodes": [e.text for e in ordered if n in e.sessions()]}
        for n in sorted(numbers)
    ]


def coverage_summary(
    lines: Sequence[Mapping[str, Any]],
    references: Mapping[tuple[str, int], str],
    episodes: Sequence[Episode],
) -> dict[str, float | int]:
    """Coverage over the sessions that have a reference summary, with the lengths that buy it.

    `coverage` is the mean of the per-session ratios (each session weighs
    the same), `coverage_micro` pools the counts (long summaries weigh more).
    Lengths are over `episodes` (each counted once, even when it spans two
    sessions) and over the scored sessions' episode texts together.
    """
    ratios: list[float] = []
    hit = total = 0
    session_tokens: list[int] = []
    reference_tokens: list[int] = []
    for line in lines:
        reference = references.get((line["sample_id"], line["session"]))
        if reference is None:
            continue
        found, wanted = covered(reference, line["episodes"])
        if not wanted:
            continue
        ratios.append(found / wanted)
        hit, total = hit + found, total + wanted
        session_tokens.append(sum(count_tokens(t) for t in line["episodes"]))
        reference_tokens.append(count_tokens(reference))
    return {
        "sessions": len(ratios),
        "sessions_without_episodes": sum(1 for line in lines if not line["episodes"]),
        "coverage": _mean(ratios),
        "coverage_micro": hit / total if total else 0.0,
        "episodes": len(episodes),
        "mean_episode_tokens": _mean([count_tokens(e.text) for e in episodes]),
        "mean_episode_tokens_per_session": _mean(session_tokens),
        "mean_reference_tokens": _mean(reference_tokens),
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def format_coverage(summary: Mapping[str, float | int]) -> str:
    return (
        f"episode coverage of the reference session summaries: {100 * summary['coverage']:.1f}% "
        f"(micro {100 * summary['coverage_micro']:.1f}%) over {summary['sessions']} sessions"
        f" ({summary['sessions_without_episodes']} without an episode); "
        f"{summary['episodes']} episodes, mean {summary['mean_episode_tokens']:.1f} tokens "
        f"({summary['mean_episode_tokens_per_session']:.1f} per session; reference summary "
        f"{summary['mean_reference_tokens']:.1f})"
    )
