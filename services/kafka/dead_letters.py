"""What a consumer does with a batch its handler fails on, and the `memory.dlq` entry a poison message becomes.

Shared by every consumer of the pipeline's topics, the Faust stages
(agents/stage.py, agents/dlq.py) and the read service's index follower
(services/api/index_follower.py), so they fail the same way: an outage is
waited out, the batch uncommitted; anything else is the data's fault, and
each message that still fails on its own goes to `memory.dlq` with a reason.
How an outage is waited out and how an entry reaches the broker is the
caller's (a Faust topic or a plain producer); the policy and the entry are here.

An entry keeps the original bytes as its value, so an operator can fix and
re-produce it; the reason, the error, the stage and where it came from are
headers. A value whose user can be told is sealed with that user's data key
(services/archive/dlq.py), so forgetting the user reaches the DLQ too. When
the original cannot fit under the broker's message limit, the entry holds a
truncated copy and says so: `x-memstream-original-size` and
`x-memstream-sha256` identify the original.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from schemas import codec
from services.archive import dlq as sealed
from services.archive.keys import KeyStore
from services.core import metrics
from services.core.errors import InvalidEvent, StoreRejected
from services.core.ingest import describe


class Consumed(Protocol):
    """A consumed message as far as parsing goes: a Faust event or an aiokafka record."""

    @property
    def value(self) -> bytes | None: ...


E = TypeVar("E")
C = TypeVar("C", bound=Consumed)
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
log = logging.getLogger(__name__)

REASON_HEADER = "x-memstream-reason"
_ERROR_CHARS = 2000
_MAX_KEY_BYTES = 1024
# Room for headers and the record envelope under the message limit.
_OVERHEAD = 8 * 1024
# What an error message may quote of the input: pydantic's input_value=..., anything in quotes.
_INPUT_VALUE = re.compile(r"input_value=.*?(?=, input_type=|\]|$)", re.DOTALL)
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")

# Waits out outages of `attempt` (each failed attempt adding `failed` to the stage's errors); anything else raises.
Outlast = Callable[[Callable[[], Awaitable[None]], int], Awaitable[None]]
# Sends one message's entry with (reason, error), once the broker has it.
DeadLetter = Callable[[E, str, str], Awaitable[None]]


def reason_of(exc: Exception) -> str:
    """The DLQ reason of a handler's failure: InvalidEvent's own, `store_rejected`, or `processing_error`."""
    if isinstance(exc, InvalidEvent):
        return exc.reason
    if isinstance(exc, StoreRejected):
        return "store_rejected"
    return "processing_error"


async def parse_or_dead_letter(messages: Sequence[C], model: type[M], dead_letter: DeadLetter[C]) -> list[tuple[C, M]]:
    """Messages that parse as `model`, with their models; the rest are dead-lettered as schema violations."""
    parsed: list[tuple[C, M]] = []
    for message in messages:
        try:
            if message.value is None:
                raise ValueError("an empty message")
            parsed.append((message, codec.loads(model, message.value)))
        except (ValueError, ValidationError) as exc:
            await dead_letter(message, "schema_violation", describe(exc))
    return parsed


async def deliver(
    items: Sequence[tuple[E, T]],
    handle: Callable[[list[T]], Awaitable[None]],
    *,
    stage: str,
    outlast: Outlast,
    dead_letter: DeadLetter[E],
) -> None:
    """Hand (message, value) pairs to `handle` so that nothing is lost and the consumer never stops.

    An outage is waited out by `outlast`: the same batch is retried,
    uncommitted, for as long as it lasts. Any other exception means some
    item is bad: the batch is retried one item at a time and each item that
    still fails is dead-lettered with its reason (`reason_of`). Handlers are
    idempotent, so the retried items that had already succeeded do no harm.
    """
    values = [value for _, value in items]
    try:
        await outlast(lambda: handle(values), len(items))
        return
    except Exception as exc:
        metrics.STAGE_ERRORS.labels(stage=stage).inc(len(items))
        if len(items) > 1:
            for item in items:
                await deliver([item], handle, stage=stage, outlast=outlast, dead_letter=dead_letter)
            return
        if not isinstance(exc, InvalidEvent):
            log.exception("%s: poison event sent to the DLQ", stage)
        await dead_letter(items[0][0], reason_of(exc), repr(exc))


def redacted(error: str) -> str:
    """An error about a sealed entry, without the input it may quote: the header stays in clear after a forget."""
    return _QUOTED.sub("'…'", _INPUT_VALUE.sub("input_value=…", error))


def value_limit(max_message_bytes: int) -> int:
    """The most of a value an entry keeps, under the broker's message limit."""
    return max(max_message_bytes - _OVERHEAD, 1024)


def _fit(raw: bytes | None, limit: int) -> tuple[bytes | None, dict[str, bytes]]:
    if raw is None or len(raw) <= limit:
        return raw, {}
    return raw[:limit], {
        "x-memstream-truncated": b"1",
        "x-memstream-original-size": str(len(raw)).encode(),
        "x-memstream-sha256": hashlib.sha256(raw).hexdigest().encode(),
    }


def source_headers(topic: str, partition: int, offset: int) -> dict[str, bytes]:
    """Where the message was: a reader drops the duplicate a crash between the DLQ send and the commit may leave."""
    return {
        "x-memstream-source-topic": topic.encode(),
        "x-memstream-source-partition": str(partition).encode(),
        "x-memstream-source-offset": str(offset).encode(),
    }


@dataclass(frozen=True)
class Entry:
    """One `memory.dlq` message, ready to send."""

    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


async def entry(
    keys: KeyStore | None,
    key: bytes | None,
    value: bytes | None,
    source: dict[str, bytes],
    *,
    stage: str,
    reason: str,
    error: str,
    limit: int,
) -> Entry:
    """The entry of a poison message, sealed for its user when `keys` can tell who that is (None: in clear).

    `limit`: `value_limit` of the broker's message size. Raises StoreUnavailable when the key store is down.
    """
    owner_headers: dict[str, bytes] = {}
    if keys is not None:
        # Base64 takes 4 bytes for 3: the sealed copy must fit too.
        value, value_headers = _fit(value, limit * 3 // 4 - 512)
        try:
            value, owner_headers = await sealed.seal_for(keys, key, value)
        except StoreRejected as exc:  # input the key store refuses: the entry stays in clear, the stage goes on
            log.warning("dlq: not sealed (%s)", exc)
        if owner_headers:  # a digest of the user's bytes, or their words quoted, would outlive their key
            value_headers.pop("x-memstream-sha256", None)
            error = redacted(error)
    else:
        value, value_headers = _fit(value, limit)
    key, _ = _fit(key, _MAX_KEY_BYTES)
    headers = {
        REASON_HEADER: reason.encode(),
        "x-memstream-error": error[:_ERROR_CHARS].encode("utf-8", "replace"),
        "x-memstream-stage": stage.encode(),
        **owner_headers,
        **source,
        **value_headers,
    }
    return Entry(key, value, headers)


def dead_lettered(stage: str, reason: str, where: str, error: str) -> None:
    """Count and log an entry the broker has acknowledged."""
    metrics.DLQ.labels(stage=stage, reason=reason).inc()
    log.warning("dlq stage=%s reason=%s at %s: %s", stage, reason, where, error[:200])
