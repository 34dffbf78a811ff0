"""What a stage waits out instead of dead-lettering: a store outage, and any Kafka producer error.

A produced message the broker did not acknowledge (unreachable, timed out,
leader moving, or refused) says nothing about the input that led to it: the
same work is retried and its source offsets stay uncommitted, the message is
never counted as bad data. The waits double up to a cap, for as long as it
takes; a worker stopped meanwhile leaves the work to its successor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError as AioKafkaError
from faust.exceptions import ProducerSendError

from services.core import metrics
from services.core.errors import StoreUnavailable
from services.kafka.producer import ProduceFailed

T = TypeVar("T")
log = logging.getLogger(__name__)

# Faust's aiokafka producer raises ProducerSendError when a send cannot start and an
# aiokafka KafkaError from an unacknowledged send; librdkafka's producer ProduceFailed.
TRANSIENT: tuple[type[Exception], ...] = (StoreUnavailable, AioKafkaError, ProducerSendError, ProduceFailed)


def transient(exc: BaseException) -> bool:
    """True when `exc` says "not now" rather than "not this input"."""
    return isinstance(exc, TRANSIENT)


async def outlasting(
    attempt: Callable[[], Awaitable[T]],
    *,
    stage: str,
    what: str,
    first_delay: float = 0.5,
    max_delay: float = 30.0,
    failed: int = 1,
    retry: Callable[[BaseException], bool] = transient,
) -> T:
    """`attempt()`'s result, calling it again after each failure `retry` accepts (others propagate).

    `failed`: how many items each failed attempt adds to the stage's error count.
    """
    delay = min(first_delay, max_delay)
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not retry(exc):
                raise
            metrics.STAGE_ERRORS.labels(stage=stage).inc(failed)
            if transient(exc):
                log.warning("%s: %s unavailable, retrying in %.1fs: %r", stage, what, delay, exc)
            else:
                log.error("%s: %s failed, retrying in %.1fs", stage, what, delay, exc_info=exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
