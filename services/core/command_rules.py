"""Rules a memory command follows on both sides of `memory.commands` (pure).

The read service answers before producing: the id an add or a correction
will write, and 404 for a topic no memory matches. The commands stage
(agents.consolidator.commands) applies the command later with the same
rules, so what the client was told is what happens.
"""

from __future__ import annotations

from schemas import MemoryRecord
from services.core.textutil import content_words, normalize, stable_id


def new_memory_id(tenant_id: str, user_id: str, command_id: str) -> str:
    """The id of what an add or a correction writes: the read service answers with it before it exists."""
    return stable_id("manual", tenant_id, user_id, command_id)


def matches_topic(record: MemoryRecord, topic: str) -> bool:
    """Whether deleting `topic` takes this memory. The rule, case- and spacing-insensitive:

    the topic names the memory's category or key, or one of its entities; or
    every content word of the topic (stopwords aside) is a word of its text,
    value or entities ("green tea" takes "I love green tea", not "greenhouse
    tea rooms"). A topic of stopwords alone matches by name only.
    """
    wanted = normalize(topic)
    if not wanted:
        return False
    names = [record.category, record.key_name, *record.entities]
    if any(name is not None and normalize(name) == wanted for name in names):
        return True
    terms = content_words(topic)
    words = set(content_words(" ".join([record.text, record.value or "", *record.entities])))
    return bool(terms) and all(term in words for term in terms)
