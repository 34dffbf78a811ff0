"""What a text is about, as words to match on: its content words and the names in it (pure).

Shared by the stages that find things in turns (rules, summaries, open
questions) and by recall, which matches a query against open questions the
same way: one definition, so a question is found and surfaced by the same words.
"""

from __future__ import annotations

import re

from services.core.textutil import content_words

_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
_STOP_ENTITIES = frozenset(
    {"I", "I'm", "I've", "I'd", "The", "This", "That", "My", "We", "Our", "It", "Hi", "Hey", "Yes", "No", "Oh", "So"}
)
# A text's related terms are kept to this many (the first, sorted): a question is short.
MAX_RELATED_TERMS = 16


def entities(text: str) -> list[str]:
    """Capitalised phrases not at a sentence start: cheap, good enough for boosts."""
    found: dict[str, None] = {}
    for match in _ENTITY.finditer(text):
        name = match.group(1)
        if name not in _STOP_ENTITIES:
            found[name] = None
    return list(found)


def related_terms(text: str) -> list[str]:
    """Content words and entities, lower-cased: what a later answer or query must touch."""
    return sorted({*content_words(text), *(e.lower() for e in entities(text))})[:MAX_RELATED_TERMS]
