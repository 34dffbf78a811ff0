"""What a text is about, as words to match on: its content words and the names in it (pure).

Shared by the stages that find things in turns (rules, summaries, open
questions) and by recall, which matches a query against open questions the
same way: one definition, so a question is found and surfaced by the same words.
"""

from __future__ import annotations

import re

from services.core.textutil import content_words

_ENTITY = re.compile(r"\b([A-Z][a-z]+(?:[ \t]+[A-Z][a-z]+)*)")
_SENTENCE_ENDS = frozenset(".!?")
# Where a look back for what precedes a capital stops: a sentence ends, a clause goes on, or a label ends.
_LOOK_BACK_STOPS = _SENTENCE_ENDS | frozenset(",;:")
_STOP_ENTITIES = frozenset(
    {"I", "I'm", "I've", "I'd", "The", "This", "That", "My", "We", "Our", "It", "Hi", "Hey", "Yes", "No", "Oh", "So"}
)
# A text's related terms are kept to this many (the first, sorted): a question is short.
MAX_RELATED_TERMS = 16


def _opens(text: str, at: int) -> bool:
    """Whether the word at `at` opens a sentence, a line, a list item or a bold label's text.

    Its capital says nothing there. Assistants write markdown ("- **Step 1:**
    Download the app", "Hope this helps! 🚀"), so marks, emoji and spaces
    between the word and what ends the sentence before it are looked past.
    A word in opening quotes starts a title, which is a name wherever it is.
    """
    if at > 0 and text[at - 1] in '"\u201c':
        return False  # a quoted title: '"The Alchemist" is worth it.'
    i, marked = at - 1, False
    while i >= 0 and not text[i].isalnum() and text[i] not in _LOOK_BACK_STOPS:
        if text[i] == "\n":
            return True
        marked = marked or text[i] in "*_"
        i -= 1
    return i < 0 or text[i] in _SENTENCE_ENDS or (text[i] == ":" and marked)


def entities(text: str) -> list[str]:
    """Capitalised phrases, less a word that opens a sentence or a line: cheap, good enough for boosts."""
    found: dict[str, None] = {}
    for match in _ENTITY.finditer(text):
        name = match.group(1)
        if _opens(text, match.start(1)):
            name = " ".join(name.split()[1:])
        if name and name not in _STOP_ENTITIES:
            found[name] = None
    return list(found)


def related_terms(text: str) -> list[str]:
    """Content words and entities, lower-cased: what a later answer or query must touch."""
    return sorted({*content_words(text), *(e.lower() for e in entities(text))})[:MAX_RELATED_TERMS]
