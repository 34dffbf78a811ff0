"""Poison messages of a Faust stage go to `memory.dlq`: the entry of services/kafka/dead_letters.py, awaited.

The entry keeps the original bytes, sealed for their user when the user can
be told (with the key store the stage passes in: its Runtime's), and the
reason in headers. The send is awaited, so the source offset is committed
only once the DLQ holds the message; the source topic, partition and offset
headers let a reader drop the duplicate a crash between the two may leave. A
DLQ that does not take the message (the broker down, or refusing it) is an
outage like any other (agents/outage.py): the send is tried again until it
is acknowledged, and the source offset waits.
"""

from __future__ import annotations

from typing import Any

from agents.outage import outlasting
from services.archive.keys import KeyStore
from services.kafka.dead_letters import dead_lettered, entry, source_headers, value_limit


class DeadLetters:
    """memory.dlq as a stage sees it: one call per poison message, bounded and awaited.

    `keys` seals the letters of identifiable users; None leaves them in clear
    (a test without a key store). It is required, so no stage forgets it.
    """

    def __init__(self, topic: Any, max_message_bytes: int, keys: KeyStore | None, *, max_delay: float = 30.0) -> None:
        self.topic = topic
        self._value_limit = value_limit(max_message_bytes)
        self._keys = keys
        self._max_delay = max_delay

    async def send(self, event: Any, *, stage: str, reason: str, error: str) -> None:
        message = event.message
        source = source_headers(str(message.topic), message.partition, message.offset)
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
            letter = await entry(
                self._keys, key, value, source, stage=stage, reason=reason, error=error, limit=self._value_limit
            )
            delivered = await self.topic.send(key=letter.key, value=letter.value, headers=letter.headers)
            if delivered is not None:
                await delivered  # the broker has it before the source offset may be committed

        await outlasting(attempt, stage=stage, what="dead letter queue", max_delay=self._max_delay)
        dead_lettered(stage, reason, where, error)
