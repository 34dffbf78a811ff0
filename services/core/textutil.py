"""Token counting, normalisation and deterministic ids: cheap and pure."""

from __future__ import annotations

import hashlib
import hmac
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


def keyed_id(secret: bytes, *parts: str) -> str:
    """A UUID (RFC 9562 version 8) that only a holder of `secret` can compute from `parts`.

    The same parts under the same secret give the same id (replays upsert);
    without the secret no dictionary over the parts finds it, which is what
    lets a memory id travel in clear after its owner's key is destroyed.
    """
    namespace, name = id_input(parts)
    digest = bytearray(hmac.new(secret, namespace.bytes + name.encode(), hashlib.sha256).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x80
    digest[8] = (digest[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(digest)))


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


def _ranges(chars: list[str]) -> str:
    """A regex character class body for `chars` (sorted), as ranges."""
    out: list[str] = []
    start = prev = chars[0]
    for c in [*chars[1:], ""]:
        if c and ord(c) == ord(prev) + 1:
            prev = c
            continue
        out.append(re.escape(start) if start == prev else f"{re.escape(start)}-{re.escape(prev)}")
        start = prev = c
    return "".join(out)


# An upper-case letter of any script, for patterns that want a capital: `re` has no \p{Lu}.
# Latin (with its extensions, Vietnamese's included), Greek and Cyrillic; scripts without case have no capitals.
UPPER = "[" + _ranges([chr(i) for i in (*range(0x530), *range(0x1E00, 0x1F00)) if chr(i).isupper()]) + "]"
# A letter of any script ("café", "Zürich", "東京"): a word character that is neither digit nor underscore.
LETTER = r"[^\W\d_]"
# Words of letters, with inner apostrophes and hyphens.
_WORD = re.compile(rf"{LETTER}(?:{LETTER}|['\u2019-]){{1,63}}")
STOPWORDS = frozenset(
    """a about above after again all also am an and any are as at be because been before being below between both but by
    can could did do does doing don't down during each few for from further had has have having he her here hers herself him
    himself his how i i'm i've if in into is it it's its itself just let's like me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own really same she should so some such than that that's the their
    theirs them themselves then there these they this those through to too under until up very was we we're were what when
    where which while who whom why will with would yeah yes you you're your yours yourself oh ok okay well thanks thank hey
    hi got get gonna know think sure great good lot much many one things thing going way per via etc vs plus lol us
    what's where's who's how's when's why's there's here's""".split()
)


def content_words(text: str) -> list[str]:
    """Lower-cased words that carry meaning (stopwords out): what summaries, topics and questions match on."""
    words = (m.group(0).lower().replace("\u2019", "'") for m in _WORD.finditer(text))
    return [w for w in words if w not in STOPWORDS]
