"""A tenant's corpus as hashed buckets: what the window stage counts and the summarizer looks up.

Two stages share this shape (the window counts accepted turns, the
summarizer asks for the buckets of a chunk's words), so it lives here rather
than in either. Terms are counted in assistant turns only: what users talk
about is their subject, however many say it. Sentences are counted in every
turn: a sentence said word for word in many turns is a formula whoever says
it, an assistant's "Happy to help!" or a user's "Quick update from my side."
that opens each of their sessions. Buckets, never words: the counts are
aggregates over every user of a tenant, and a forgotten user's words must
not be readable from them. agents/summarizer/salience.py turns the counts
into weights.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

from agents.rules.extract import sentences
from schemas import Role, TurnEvent
from services.core.textutil import content_words

BUCKETS = 1 << 18
# The bucket counting the documents of terms (assistant turns) themselves.
DOCUMENTS = -1
# The bucket counting the documents of sentences (turns of any role).
TURNS = -2


def _bucket(kind: str, text: str) -> int:
    digest = hashlib.blake2b(f"{kind}\x1f{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


def term_bucket(term: str) -> int:
    return _bucket("t", term)


def sentence_key(sentence: str) -> str:
    """A sentence as its content words: "Happy to help with that!" and "happy to help with that" are one."""
    return " ".join(content_words(sentence))


def sentence_bucket(sentence: str) -> int:
    return _bucket("s", sentence_key(sentence))


def sentence_buckets(text: str) -> set[int]:
    return {sentence_bucket(s) for s in sentences(text) if sentence_key(s)}


def document_buckets(text: str) -> set[int]:
    """An assistant turn's buckets: each distinct term, and each sentence that has content words."""
    return {term_bucket(w) for w in content_words(text)} | sentence_buckets(text)


def turn_buckets(turn: TurnEvent) -> set[int]:
    """What one turn adds to the counts, the buckets counting documents included."""
    if turn.role is Role.ASSISTANT:
        return document_buckets(turn.content) | {DOCUMENTS, TURNS}
    return sentence_buckets(turn.content) | {TURNS}


def corpus_documents(turns: Iterable[TurnEvent]) -> list[set[int]]:
    return [turn_buckets(t) for t in turns]


def tally(documents: Iterable[set[int]]) -> Counter[int]:
    """The counts `documents` add: each document counts once in each of its buckets."""
    counts: Counter[int] = Counter()
    for buckets in documents:
        counts.update(buckets)
    return counts


def corpus_counts(turns: Iterable[TurnEvent]) -> Counter[int]:
    """What these turns add to a tenant's counts."""
    return tally(corpus_documents(turns))


def lookup_buckets(turns: Iterable[TurnEvent]) -> set[int]:
    """Every bucket a chunk's summary may ask about (its terms and sentences, any role)."""
    return set().union(*(document_buckets(t.content) for t in turns)) | {DOCUMENTS, TURNS}
