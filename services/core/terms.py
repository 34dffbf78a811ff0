"""What a text is about, as words to match on: its content words and the names in it (pure).

Shared by the stages that find things in turns (rules, summaries, open
questions) and by recall, which matches a query against open questions the
same way: one definition, so a question is found and surfaced by the same words.
"""

from __future__ import annotations

import re

from services.core.textutil import LETTER, content_words

# A word of letters in any script, hyphen-joined parts included ("Belém", "Flask-JWT-Extended"); a name is a
# run of them, each capitalised, on one line.
_WORD = re.compile(rf"{LETTER}{{1,64}}(?:['\u2019-]{LETTER}{{1,64}}){{0,8}}")
# What follows an apostrophe when it is no part of a name: "Anna's", "You're", "Can't".
_CLITICS = frozenset({"s", "re", "ve", "d", "ll", "t", "m"})
_GAP = re.compile(r"[ \t]{1,16}")
# Code is not prose: `None`, `Content-Type` and a fenced block's `Order.query` name nothing.
_INLINE_CODE = re.compile(r"`[^`\n]{1,200}`")
_FENCE = re.compile(r"^[ \t]{0,3}(?:```|~~~)", re.MULTILINE)
_NOT_NEWLINE = re.compile(r"[^\n]")
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


def _capitalised(word: str) -> bool:
    """ "Anna", "McDonald", "O'Brien", "TP-Link"; not "A", "JWT", "X-ray" or "iPhone"."""
    return word[:1].isupper() and any(
        len(part) > 1 and part[0].isupper() and (part[1].islower() or (part[1] == "'" and len(part) > 2))
        for part in word.split("-")
    )


def _prose(text: str) -> str:
    """`text` with inline code and fenced blocks blanked out, so every offset still points where it did."""
    text = _INLINE_CODE.sub(lambda m: " " * len(m.group()), text)
    fences = [m.start() for m in _FENCE.finditer(text)]
    if len(fences) < 2:
        return text
    parts, last = [], 0
    for start, end in zip(fences[::2], fences[1::2], strict=False):
        close = text.find("\n", end)
        close = len(text) if close < 0 else close
        parts += [text[last:start], _NOT_NEWLINE.sub(" ", text[start:close])]
        last = close
    return "".join([*parts, text[last:]])


def _starts_word(text: str, at: int) -> bool:
    """Nothing of a word before `at`: "l'Orangerie" and "7-Eleven" hold no name, "'Embracing Identity'" does."""
    if at == 0:
        return True
    before = text[at - 1]
    if before in "'\u2019-":
        return at < 2 or not text[at - 2].isalnum()
    return not before.isalnum()


def _names(text: str) -> list[tuple[int, str]]:
    """(offset, phrase) of each run of capitalised words: "New York", "Belém", "Flask-JWT-Extended".

    A clitic ends a word and a name: "You're" is "You", and "Charlotte's Web" is two.
    """
    found: list[tuple[int, str]] = []
    words: list[str] = []  # the run so far, from offset `start`; `end`: where its last word ended
    start = end = -1
    for match in _WORD.finditer(text):
        head, _, tail = (whole := match.group().replace("\u2019", "'")).rpartition("'")
        word, clitic = (head, True) if head and tail.lower() in _CLITICS else (whole, False)
        name = _capitalised(word) and _starts_word(text, match.start())
        if name and words and _GAP.fullmatch(text, end, match.start()) is not None:
            words.append(word)
        else:
            if words:
                found.append((start, " ".join(words)))
            start, words = match.start(), [word] if name else []
        end = match.end()
        if clitic and words:
            found.append((start, " ".join(words)))
            words = []
    if words:
        found.append((start, " ".join(words)))
    return found


def entities(text: str) -> list[str]:
    """Capitalised phrases, less a word that opens a sentence or a line: cheap, good enough for boosts."""
    found: dict[str, None] = {}
    prose = _prose(text)
    for at, name in _names(prose):
        if _opens(prose, at):
            name = " ".join(name.split()[1:])
        if name and name not in _STOP_ENTITIES:
            found[name] = None
    return list(found)


def related_terms(text: str) -> list[str]:
    """Content words and entities, lower-cased: what a later answer or query must touch."""
    return sorted({*content_words(text), *(e.lower() for e in entities(text))})[:MAX_RELATED_TERMS]
