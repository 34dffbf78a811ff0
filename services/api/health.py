"""Readiness: Kafka, Postgres and the recall index must each answer."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaClient

from services.runtime import Runtime

log = logging.getLogger(__name__)


class Readiness:
    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    async def _kafka(self) -> bool:
        client = AIOKafkaClient(bootstrap_servers=self._rt.settings.kafka_bootstrap, request_timeout_ms=3000)
        try:
            await asyncio.wait_for(client.bootstrap(), timeout=5)
            return True
        finally:
            await client.close()

    async def check(self) -> dict[str, bool]:
        names = ("kafka", "postgres", "qdrant")
        probes = (self._kafka(), self._rt.pg.ping(), self._rt.index.ping())
        results = await asyncio.gather(*probes, return_exceptions=True)
        out = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                log.info("readiness %s: %s", name, result)
            out[name] = result is True
        return out
