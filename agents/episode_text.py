"""The extractive episode's text: a dated header naming its topics, then the chosen sentences.

Shared by the summarizer, which writes it, and maintenance, which quotes an episode inside a pattern and
must not nest one header in another ("Typically: Conversation on … about …").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date

_HEADER = re.compile(r"Conversation on \d{4}-\d{2}-\d{2} about [^.]*\.\s*")


def header(day: date, topics: Sequence[str]) -> str:
    return f"Conversation on {day.isoformat()} about {', '.join(topics[:3]) or 'small talk'}."


def body(text: str) -> str:
    """The text without its header (an LLM's summary has none and is returned as it is)."""
    match = _HEADER.match(text)
    return text[match.end() :] if match else text
