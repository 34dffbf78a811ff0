"""Poison messages go to `memory.dlq`: original bytes as the value, the reason in headers.

Keeping the value byte-for-byte lets an operator fix and re-produce it. A
value whose user can be told (JSON naming tenant_id and user_id, or a
`tenant:user` key of a user with a data key) is kept sealed with that user's
data key (services/archive/dlq.py), tenant and user in headers, so
forgetting the user reaches the DLQ; `memstream dlq` opens it. Bytes that
name nobody stay in clear and expire with the topic (30 days). When
the original cannot fit under the broker's message limit, the DLQ keeps a
truncated copy and says so: `x-memstream-original-size` and
`x-memstream-sha256` identify the original. The send is awaited, so the
source offset is committed only once the DLQ holds the message; the source
topic, partition and offset headers let a reader drop the duplicate a crash
between the two may leave. A DLQ that does not take the message (the broker
down, or refusing it) is an outage like any other (agents/outage.py): the
send is tried again until it is acknowledged, and the source offset waits.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from agents.outage import outlasting
from services.archive import dlq as sealed
from services.archive.keys import KeyStore
from services.core import metrics
from services.core.errors import StoreRejected

log = logging.getLogger(__name__)
# The process's key store, set once as the worker builds its stages (`use_keys`): every stage's DLQ seals with it.
_keys: KeyStore | None = None


def use_keys(keys: KeyStore | None) -> None:
    """Seal dead letters of identifiable users with these keys (None: leave them in clear, as tests without keys do)."""
    global _keys
    _keys = keys


REASON_HEADER = "x-memstream-reason"
_ERROR_CHARS = 2000
# What an error message may quote of the input: pydantic's input_value=..., anything in quotes.
_INPUT_VALUE = re.compile(r"input_value=.*?(?=, input_type=|\]|$)", re.DOTALL)
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


def redacted(error: str) -> str:
    """An error about a sealed entry, without the input it may quote: the header stays in clear after a forget."""
    return _QUOTED.sub("'…'", _INPUT_VALUE.sub("input_value=…", error))


_MAX_KEY_BYTES = 1024
# Room for headers and the record envelope under the message limit.
_OVERHEAD = 8 * 1024


def _fit(raw: bytes | None, limit: int) -> tuple[bytes | None, dict[str, bytes]]:
    if raw is None or len(raw) <= limit:
        return raw, {}
    return raw[:limit], {
        "x-memstream-truncated": b"1",
        "x-memstream-original-size": str(len(raw)).encode(),
        "x-memstream-sha256": hashlib.sha256(raw).hexdigest().encode(),
    }


class DeadLetters:
    """memory.dlq as a stage sees it: one call per poison message, bounded and awaited."""

    def __init__(
        self, topic: Any, max_message_bytes: int, keys: KeyStore | None = None, *, max_delay: float = 30.0
    ) -> None:
        self.topic = topic
        self._value_limit = max(max_message_bytes - _OVERHEAD, 1024)
        self._keys = keys
        self._max_delay = max_delay

    async def send(self, event: Any, *, stage: str, reason: str, error: str) -> None:
        message = event.message
        source = {
            "x-memstream-source-topic": str(message.topic).encode(),
            "x-memstream-source-partition": str(message.partition).encode(),
            "x-memstream-source-offset": str(message.offset).encode(),
        }
        where = f"{message.partition}/{message.offset}"
        await self._send(event.key, event.value, source, stage=stage, reason=reason, error=error, where=where)

    async def send_value(self, key: bytes | None, value: bytes, *, stage: str, reason: str, error: str) -> None:
        """Dead-letter one item of a batch by its own bytes (a batch handler has no event per item)."""
        await self._send(key, value, {}, stage=stage, reason=reason, error=error, where="batch item")

    async def _send(
        self,
        key: bytes | None,
        value: bytes | None,
        source: dict[str, bytes],
        *,
        stage: str,
        reason: str,
        error: str,
        where: str,
    ) -> None:
        """Sealed and sent again after each outage (the key store's or the broker's) until the broker has it."""

        async def attempt() -> None:
            await self._send_once(key, value, source, stage=stage, reason=reason, error=error)

        await outlasting(attempt, stage=stage, what="dead letter queue", max_delay=self._max_delay)
        metrics.DLQ.labels(stage=stage, reason=reason).inc()
        log.warning("dlq stage=%s reason=%s at %s: %s", stage, reason, where, error[:200])

    async def _send_once(
        self,
        key: bytes | None,
        value: bytes | None,
        source: dict[str, bytes],
        *,
        stage: str,
        reason: str,
        error: str,
    ) -> None:
        keys = self._keys or _keys
        owner_headers: dict[str, bytes] = {}
        if keys is not None:
            # Base64 takes 4 bytes for 3: the sealed copy must fit too.
            value, value_headers = _fit(value, self._value_limit * 3 // 4 - 512)
            try:
                value, owner_headers = await sealed.seal_for(keys, key, value)
            except StoreRejected as exc:  # input the key store refuses: the entry stays in clear, the stage goes on
                log.warning("dlq: not sealed (%s)", exc)
            if owner_headers:  # a digest of the user's bytes, or their words quoted, would outlive their key
                value_headers.pop("x-memstream-sha256", None)
                error = redacted(error)
        else:
            value, value_headers = _fit(value, self._value_limit)
        key, _ = _fit(key, _MAX_KEY_BYTES)
        headers = {
            REASON_HEADER: reason.encode(),
            "x-memstream-error": error[:_ERROR_CHARS].encode("utf-8", "replace"),
            "x-memstream-stage": stage.encode(),
            **owner_headers,
            **source,
            **value_headers,
        }
        delivered = await self.topic.send(key=key, value=value, headers=headers)
        if delivered is not None:
            await delivered  # the broker has it before the source offset may be committed
