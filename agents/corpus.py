"""A tenant's assistant corpus as hashed buckets: what the window stage counts and the summarizer looks up.

Two stages share this shape (the window counts accepted assistant turns,
the summarizer asks for the buckets of a chunk's words), so it lives here
rather than in either. Buckets, never words: the counts are aggregates over
every user of a tenant, and a forgotten user's words must not be readable
from them. agents/summarizer/salience.py turns the counts into weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from agents.rules.extract import sentences
from schemas import Role, TurnEvent
from services.core.textutil import content_words

BUCKETS = 1 << 18
# The bucket counting documents (assistant turns) themselves.
DOCUMENTS = -1


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


def document_buckets(text: str) -> set[int]:
    """What one assistant turn adds to the counts: each distinct term, and each sentence that has content words."""
    terms = {term_bucket(w) for w in content_words(text)}
    return terms | {sentence_bucket(s) for s in sentences(text) if sentence_key(s)}


def assistant_documents(turns: Iterable[TurnEvent]) -> list[set[int]]:
    return [document_buckets(t.content) for t in turns if t.role is Role.ASSISTANT]


def lookup_buckets(turns: Iterable[TurnEvent]) -> set[int]:
    """Every bucket a chunk's summary may ask about (its terms and sentences, any role)."""
    return set().union(*(document_buckets(t.content) for t in turns)) | {DOCUMENTS}
