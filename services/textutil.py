"""Token counting, normalisation and deterministic ids: cheap and pure."""

from __future__ import annotations

import hashlib
import re
import uuid

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_NAMESPACE = uuid.UUID("6f0d5a52-7b5e-4d0e-9a53-2f1f6c7e0b11")


def count_tokens(text: str) -> int:
    """Words and punctuation marks: close to BPE counts for English chat."""
    return len(_TOKEN.findall(text))


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text.strip().lower())


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()


def stable_id(*parts: str) -> str:
    """A UUID that is the same for the same parts: replays upsert, never duplicate."""
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(parts)))
