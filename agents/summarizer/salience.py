"""What makes a sentence worth an episode: the chunk's own terms, weighed against what every assistant says.

Assistants pad every reply ("Happy to help!", "Great question!", "Anything
else?"), so within one chunk the padding is often the most frequent thing
said: counting a chunk's words alone made episodes open with it and topics
read "happy, help". A term here weighs its inverse document frequency over
the tenant's assistant turns, which the window stage counts as turns arrive
(services/stores/postgres/corpus.py): words nearly every reply carries weigh
little however often this chunk repeats them, and a sentence many turns say
(normalised; a user's turns count too, so the "Quick update from my side."
one user opens every session with is filler as well) is filler whatever
its words. Until a tenant has
`MIN_DOCUMENTS` assistant turns the counts mean little, and a short list of
padding words stands in for them.

The counts are kept in hashed buckets, never as words: they are aggregates
over every user of a tenant, and a forgotten user's words must not be
readable from them (docs/operations/forgetting.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from agents.corpus import DOCUMENTS, TURNS, sentence_bucket, sentence_key, term_bucket
from services.core.textutil import content_words

MIN_DOCUMENTS = 50
# A sentence in at least this share of assistant turns (and `MIN_SENTENCE_DOCS` of them) is padding.
FILLER_SENTENCE_SHARE = 0.01
MIN_SENTENCE_DOCS = 5
FILLER_WEIGHT = 0.1
# A term in at least this share of the tenant's assistant turns is padding whoever says it: a support desk's
# brand and persona ("Brightway", "Ava") are in every reply. A subject many users share ("contract" at a
# telecom, "Japan" at a travel agent) is in far fewer, and is still the subject of a user's chat.
PADDING_SHARE = 0.25

# Padding words of assistant replies, and the interjections of any chat, that are not stopwords
# (services.core.textutil.STOPWORDS has the rest).
FILLER = frozenset(
    """absolutely amazing anything anytime assist assistance awesome certainly course definitely delighted else excellent
    excited exciting fantastic feel free glad happy help helpful helps hope hoping let love nice perfect pleasure
    question questions quick sounds today welcome wonderful hesitate i'd i'll you'll you'd we'll
    wow hello haha lol congrats congratulations cool
    he's she's they're they've you've we've can't isn't won't didn't
    doesn't wasn't aren't couldn't wouldn't shouldn't haven't hasn't""".split()
)


@dataclass(frozen=True)
class Salience:
    """Term and sentence weights in (0, 1] from bucket counts (`counts[DOCUMENTS]`: assistant turns counted)."""

    counts: Mapping[int, int] = field(default_factory=dict)

    @property
    def documents(self) -> int:
        return self.counts.get(DOCUMENTS, 0)

    def term(self, word: str) -> float:
        if word in FILLER:
            return FILLER_WEIGHT
        n = self.documents
        if n < MIN_DOCUMENTS:
            return 1.0
        df = self.counts.get(term_bucket(word), 0)
        return max(FILLER_WEIGHT, math.log((1 + n) / (1 + df)) / math.log(1 + n))

    def padding(self, word: str) -> bool:
        """A padding word (FILLER), or one in PADDING_SHARE of the tenant's assistant turns."""
        if word in FILLER:
            return True
        n = self.documents
        return n >= MIN_DOCUMENTS and self.counts.get(term_bucket(word), 0) >= PADDING_SHARE * n

    @property
    def turns(self) -> int:
        """Turns whose sentences are counted: never fewer than the assistant turns, which every count since
        user turns are counted includes, and which alone a tenant counted before then has for its sentences."""
        return max(self.counts.get(TURNS, 0), self.documents)

    def sentence(self, sentence: str) -> float:
        if all(w in FILLER for w in content_words(sentence)) or self.formula(sentence):
            return FILLER_WEIGHT
        return 1.0

    def formula(self, sentence: str) -> bool:
        """Whether the tenant's turns say this sentence word for word often enough to be a formula."""
        n = self.turns
        if n < MIN_DOCUMENTS or not sentence_key(sentence):
            return False
        df = self.counts.get(sentence_bucket(sentence), 0)
        return df >= MIN_SENTENCE_DOCS and df >= FILLER_SENTENCE_SHARE * n


NEUTRAL = Salience()
