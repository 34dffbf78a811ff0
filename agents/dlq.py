"""Poison messages go to `memory.dlq`: original bytes as the value, the reason in headers.

Keeping the value byte-for-byte lets an operator fix and re-produce it.
"""

from __future__ import annotations

import logging
from typing import Any

from services import metrics

log = logging.getLogger(__name__)

REASON_HEADER = "x-memstream-reason"


async def send_to_dlq(dlq_topic: Any, event: Any, *, stage: str, reason: str, error: str) -> None:
    message = event.message
    headers = {
        REASON_HEADER: reason.encode(),
        "x-memstream-error": error[:2000].encode(),
        "x-memstream-stage": stage.encode(),
        "x-memstream-source-topic": str(message.topic).encode(),
        "x-memstream-source-partition": str(message.partition).encode(),
        "x-memstream-source-offset": str(message.offset).encode(),
    }
    await dlq_topic.send(key=event.key, value=event.value, headers=headers)
    metrics.DLQ.labels(stage=stage, reason=reason).inc()
    log.warning(
        "dlq stage=%s reason=%s offset=%s/%s: %s", stage, reason, message.partition, message.offset, error[:200]
    )
