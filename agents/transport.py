"""A Faust Kafka transport whose consumer waits less for an empty fetch.

faust-streaming builds its aiokafka consumer with `fetch_max_wait_ms=1500`
and no setting to change it. A broker that holds an empty fetch for the full
wait (tansu does) then adds up to 1.5 s to every hop, and a turn crosses three
hops before it is recallable. A short wait costs a few idle fetches a second.
"""

from __future__ import annotations

from typing import Any, ClassVar

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it builds its fetcher.
        consumer._fetch_max_wait_ms = transport.fetch_max_wait_ms
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with a settable consumer fetch wait."""

    Consumer: ClassVar[Any] = _Consumer

    def __init__(self, *args: Any, fetch_max_wait_ms: int = 1500, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fetch_max_wait_ms = fetch_max_wait_ms
