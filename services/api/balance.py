"""Read replicas keep an even share of the port's connections.

Replicas share one port with SO_REUSEPORT, and the kernel places each new
connection by a hash of its addresses: with few long-lived keep-alive
connections that is far from even. Eight clients over two replicas split
4/4 only about a quarter of the time; 6/2 or worse a quarter of the time,
and then one replica queues three requests for each of the other's while
the other idles: a machine with cores to spare leaves them unused (on 2
saturated cores it evened the replicas' CPU, 0.68 / 0.52 -> 0.60 / 0.59,
but not the p95: docs/operations/scaling.md).

So each replica writes how many connections it holds into its slot of a
small shared file (`data_dir/replicas/connections`, one slot per replica,
each stamped with the time it was written), and reads the others' slots.
A replica holding more than its fair share (the live replicas' total over
their number, rounded up) answers that many responses with
`connection: close`. The client opens a new connection, which the kernel
places afresh, so the split drifts toward even within a few rounds; a
replica at or below its share never closes anything. A slot not written
for `STALE_AFTER` seconds (a replica that stopped or died) does not count.

The file is local state for the processes on one host, as the port is;
a torn read of a slot only misjudges one round.
"""

from __future__ import annotations

import asyncio
import math
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.core import metrics
from services.core.mapped import mapped

# count, written at (wall clock: the processes share it, a monotonic clock is per boot anyway)
_SLOT = struct.Struct("<qd")
SLOTS = 16  # settings.replica is 1..16
# A slot older than this is a replica that no longer serves.
STALE_AFTER = 2.0
# How often a replica writes its count and reads the others'.
EVERY = 0.25
_CLOSE = (b"connection", b"close")


def excess(mine: int, peers: Sequence[int]) -> int:
    """Connections this replica holds beyond its fair share: ceil(total / replicas) of all live replicas."""
    fair = math.ceil((mine + sum(peers)) / (len(peers) + 1))
    return max(0, mine - fair)


class Board:
    """The shared file of connection counts, one slot per replica (1-based, as settings.replica)."""

    def __init__(self, path: Path) -> None:
        self._map = mapped(path, SLOTS * _SLOT.size)  # zeros: count 0, written at 0 (stale)

    def write(self, replica: int, count: int, at: float) -> None:
        _SLOT.pack_into(self._map, (replica - 1) * _SLOT.size, count, at)

    def peers(self, replica: int, now: float) -> list[int]:
        """The counts of the other replicas that wrote within STALE_AFTER seconds."""
        live = []
        for i in range(SLOTS):
            if i != replica - 1:
                count, at = _SLOT.unpack_from(self._map, i * _SLOT.size)
                if now - at <= STALE_AFTER:
                    live.append(count)
        return live

    def clear(self, replica: int) -> None:
        """A replica that stops leaves at once rather than after STALE_AFTER."""
        self.write(replica, 0, 0.0)

    def close(self) -> None:
        self._map.close()


class ConnectionBalance:
    """Decides which responses close their connection, from this replica's count and its peers' (module doc)."""

    def __init__(
        self, board: Board, replica: int, connections: Callable[[], int], clock: Callable[[], float] = time.time
    ) -> None:
        self._board = board
        self._replica = replica
        self._name = f"r{replica}"
        self._connections = connections
        self._clock = clock
        self._to_close = 0

    def tick(self) -> int:
        """Publishes this replica's count and sets how many responses close their connection until the next tick."""
        now, mine = self._clock(), self._connections()
        self._board.write(self._replica, mine, now)
        self._to_close = excess(mine, self._board.peers(self._replica, now))
        metrics.REPLICA_CONNECTIONS.labels(replica=self._name).set(mine)
        return self._to_close

    @property
    def closing(self) -> bool:
        return self._to_close > 0

    def close_this_one(self) -> bool:
        if self._to_close <= 0:
            return False
        self._to_close -= 1
        metrics.REPLICA_REBALANCED.labels(replica=self._name).inc()
        return True

    async def run(self, every: float = EVERY) -> None:
        try:
            while True:
                self.tick()
                await asyncio.sleep(every)
        finally:
            self._board.clear(self._replica)
            self._board.close()


class Rebalance:
    """Outermost ASGI layer of a replica: a response the balance picks tells its client to reconnect."""

    def __init__(self, app: ASGIApp, balance: ConnectionBalance) -> None:
        self.app = app
        self._balance = balance

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._balance.closing:
            await self.app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self._balance.close_this_one():
                message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
            await send(message)

        await self.app(scope, receive, closing)
