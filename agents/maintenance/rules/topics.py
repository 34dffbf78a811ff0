"""Semantic topics: a term several sessions' episodes share becomes one `semantic` memory, versioned as it grows.

A topic term is a content word of an episode's `category` that is not the
name of someone speaking or spoken to (`names`: who, not what). A term given as a label by `MIN_LABELS` episodes
qualifies when enough recent episodes from enough sessions mention it
(`supported`, `mentions`), and those are its members. A category holds a
session's three most telling words, and the subject of every session is
seldom among them: six sessions about sourdough labelled it in three, and
the topic said "Discussed in 3 sessions" beside a second topic, "starter",
of the other three; three sessions about it among others labelled it in two,
and there was no topic at all. Qualifying terms are ranked, overlapping ones
fold into the better-ranked topic, and at most `semantic_max_topics` are
kept (`topics`). A topic's memory gets a new version only when an episode it
does not already cover joins (`semantic_of`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from agents.maintenance.rules.common import mean_vector, ordered_terms, snippet, span, terms_of
from agents.maintenance.rules.config import Rules
from agents.maintenance.rules.state import Plan, active_episodes
from agents.maintenance.rules.synthesized import covered, synthesized
from schemas import MemoryRecord, MemoryType
from services.core.textutil import LETTER, content_words, stable_id

SEMANTIC_MIN_SESSIONS = 2
NAME_MENTIONS = 2
# Episodes that must give a term as a label before its mentions count: a word is a subject somewhere.
MIN_LABELS = 2


_WHO = rf"{LETTER}[\w'\u2019-]{{0,30}}"
# A sentence's speaker label: "user: Caroline: I went to …".
_SPEAKER = re.compile(rf"(?:^|(?<=user: )|(?<=assistant: ))({_WHO}(?: {_WHO}){{0,2}}):\s", re.MULTILINE)
# Someone spoken to: "Thanks, Nate", "Hey Mel", ", Joanna!".
_VOCATIVE = re.compile(
    rf"\b(?:hi|hey|hello|thanks|thank you|bye|congrats|congratulations|dear|sorry)[,!]?\s{{1,3}}({_WHO})"
    rf"|,\s{{1,3}}({_WHO})!",
    re.IGNORECASE,
)


def names(episodes: Iterable[MemoryRecord]) -> set[str]:
    """Entities of at least NAME_MENTIONS episodes that someone speaks as or to, lower-cased: who, not what.

    Two friends' names are in every session of theirs and say nothing of its
    subject; "Japan" in six sessions of trip planning, or "Flask" in six about
    an API, is the subject. A speaker labels most of the episodes that name
    them; a bold label in an itinerary ("**Kyoto:** three nights") labels one.
    """
    mentions = Counter(e for r in episodes for e in {x.lower() for x in r.entities})
    labelled = Counter(who for r in episodes for who in {w.lower() for w in _SPEAKER.findall(r.text)})
    spoken_to = {w.lower() for r in episodes for found in _VOCATIVE.findall(r.text) for w in found if w}

    def who(name: str) -> bool:
        first = name.split()[0]
        return bool({name, first} & spoken_to) or 2 * max(labelled[name], labelled[first]) >= mentions[name]

    return {e for e, n in mentions.items() if n >= NAME_MENTIONS and who(e)}


@dataclass(frozen=True)
class Topic:
    """A topic with real support: its best-ranked term (the key), the terms folded into it, its episodes."""

    term: str
    terms: tuple[str, ...]
    members: tuple[MemoryRecord, ...]

    @property
    def ids(self) -> set[str]:
        return {r.id for r in self.members}


def sessions_of(records: Iterable[MemoryRecord]) -> int:
    return len({r.source.session_id for r in records})


def supported(carrying: Sequence[MemoryRecord], rules: Rules) -> list[MemoryRecord] | None:
    """The episodes within the window of the latest one, sorted by id, if they are support enough."""
    latest = max(r.observed_at for r in carrying)
    members = sorted((r for r in carrying if r.observed_at >= latest - rules.semantic_window), key=lambda r: r.id)
    if len(members) < rules.semantic_min_members or sessions_of(members) < SEMANTIC_MIN_SESSIONS:
        return None
    return members


def mentions(episode: MemoryRecord) -> set[str]:
    """The content words of an episode's text: its labels and what its sentences say."""
    return set(content_words(episode.text))


def _place(term: str, episode: MemoryRecord) -> int:
    """Where the episode's labels give `term`: 0 first; after every label when only its text mentions it."""
    labels = ordered_terms(episode)
    return labels.index(term) if term in labels else len(labels)


def topics(episodes: Sequence[MemoryRecord], rules: Rules) -> list[Topic]:
    """The user's topics, best supported first: qualifying terms, overlapping ones folded, at most the cap."""
    by_term: dict[str, list[MemoryRecord]] = {}
    who = names(episodes)
    for episode in episodes:
        for term in terms_of(episode) - who:
            by_term.setdefault(term, []).append(episode)
    mentioned: dict[str, list[MemoryRecord]] = {term: [] for term in by_term if len(by_term[term]) >= MIN_LABELS}
    for episode in episodes:
        for term in mentions(episode) | terms_of(episode):
            if term in mentioned:
                mentioned[term].append(episode)
    qualifying = [(term, members) for term, said in mentioned.items() if (members := supported(said, rules))]

    def rank(found: tuple[str, list[MemoryRecord]]) -> tuple[int, int, int, int, int, str]:
        # Labelled support first, as before mentions counted (a word every session says, such as "need",
        # must not outrank the subjects); then mentions; ties: the term its episodes list first, then the term.
        term, members = found
        labelled = [r for r in members if term in terms_of(r)]
        return (
            -sessions_of(labelled),
            -len(labelled),
            -sessions_of(members),
            -len(members),
            sum(_place(term, r) for r in members),
            term,
        )

    qualifying.sort(key=rank)
    chosen: list[Topic] = []
    for term, members in qualifying:
        ids = {r.id for r in members}
        for k, topic in enumerate(chosen):
            if len(ids & topic.ids) >= rules.topic_overlap * len(ids | topic.ids):
                union = {r.id: r for r in [*topic.members, *members]}
                chosen[k] = Topic(topic.term, (*topic.terms, term), tuple(sorted(union.values(), key=lambda r: r.id)))
                break
        else:
            if len(chosen) < rules.semantic_max_topics:
                chosen.append(Topic(term, (term,), tuple(members)))
    return chosen


def semantic_text(terms: Sequence[str], members: Sequence[MemoryRecord]) -> str:
    latest = max(members, key=lambda r: (r.observed_at, r.id))
    return (
        f"Recurring topic: {', '.join(terms)}. Discussed in {sessions_of(members)} sessions ({span(members)}). "
        f"Most recently: {snippet(latest)}"
    )


def semantic_of(
    topic: Topic, previous: MemoryRecord | None, everything: dict[str, MemoryRecord]
) -> tuple[list[MemoryRecord], str] | None:
    """The members of a new version of the topic's memory and its id, or None if nothing new joined.

    A new version covers the previous version's members too, so its
    provenance is the topic's whole history, not only the latest window.
    """
    known = covered(previous) if previous is not None else set()
    if previous is not None and topic.ids <= known:
        return None
    union = {r.id: r for r in topic.members}
    union.update({i: everything[i] for i in known if i in everything and i not in union})
    first = topic.members[0]
    record_id = stable_id(first.tenant_id, first.user_id, MemoryType.SEMANTIC.value, topic.term, *sorted(union))
    return sorted(union.values(), key=lambda r: r.id), record_id


def semantics(plan: Plan, taken: set[str], now: datetime, rules: Rules, inactive: dict[str, MemoryRecord]) -> None:
    active = plan.active()
    previous = {r.key_name: r for r in active if r.type is MemoryType.SEMANTIC and r.key_name}
    everything = {**inactive, **{r.id: r for r in active}}
    for topic in topics(active_episodes(plan), rules):
        old = previous.get(topic.term)
        planned = semantic_of(topic, old, everything)
        if planned is None or planned[1] in taken:
            continue
        union, record_id = planned
        with_vectors = [v for r in union if (v := plan.vectors.get(r.id)) is not None]
        if not with_vectors:
            continue  # nothing to index it by: better absent than active and unfindable
        text = semantic_text(topic.terms, union)
        record = synthesized(record_id, MemoryType.SEMANTIC, text, ", ".join(topic.terms), union, now, topic.term)
        plan.vectors[record.id] = mean_vector(with_vectors)
        plan.touch(record, "semantic", f"topic '{topic.term}' across {sessions_of(union)} sessions")
        if old is not None:
            plan.supersede(old.id, record, "semantic_superseded", f"topic '{topic.term}' has a new version {record.id}")
