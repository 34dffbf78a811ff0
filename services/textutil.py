"""Token counting, normalisation and deterministic ids: cheap and pure."""

from __future__ import annotations

import hashlib
import json
import re
import uuid

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_NAMESPACE = uuid.UUID("6f0d5a52-7b5e-4d0e-9a53-2f1f6c7e0b11")
# Tuples the U+001F join cannot represent unambiguously (see id_input).
_ESCAPED_NAMESPACE = uuid.uuid5(_NAMESPACE, "memstream:stable_id:hex-array")
_SEPARATOR = "\x1f"


def count_tokens(text: str) -> int:
    """Words and punctuation marks: close to BPE counts for English chat."""
    return len(_TOKEN.findall(text))


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text.strip().lower())


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()


def stable_id(*parts: str) -> str:
    """A UUID that is the same for the same parts: replays upsert, never duplicate.

    Different part tuples never share an input (see `id_input`), so ids of
    different tenants or users cannot collide short of a SHA-1 collision.
    """
    namespace, name = id_input(parts)
    return str(uuid.uuid5(namespace, name))


def id_input(parts: tuple[str, ...]) -> tuple[uuid.UUID, str]:
    """The (namespace, name) pair `stable_id` hashes; an injective function of `parts`.

    Parts joined by U+001F stay the input whenever that is unambiguous (at least
    one part, none containing U+001F, all valid UTF-8): every id minted before
    this rule keeps its value, so stored memories and outbox rows still match on
    replay. Any other tuple becomes a JSON array of each part's UTF-8 bytes in
    hex (surrogates kept distinct via "surrogatepass"), under a namespace of its
    own. Both forms decode back to the parts and never share a namespace, so two
    different tuples never meet.
    """
    if parts and not any(_SEPARATOR in p for p in parts):
        joined = _SEPARATOR.join(parts)
        if _encodable(joined):
            return _NAMESPACE, joined
    return _ESCAPED_NAMESPACE, json.dumps([p.encode("utf-8", "surrogatepass").hex() for p in parts])


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
