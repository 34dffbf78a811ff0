"""Read replicas keeping an even share of the port's connections (services/api/balance.py)."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from services.api.balance import STALE_AFTER, Board, ConnectionBalance, Rebalance, excess


def test_excess_is_what_a_replica_holds_beyond_its_rounded_up_share() -> None:
    assert excess(6, [2]) == 2  # 8 over 2: 4 each
    assert excess(5, [4]) == 0  # 9 over 2: up to 5 each
    assert excess(4, [4]) == 0
    assert excess(2, [6]) == 0  # under its share: never closes
    assert excess(7, []) == 0  # alone on the port
    assert excess(9, [0, 0]) == 6  # 9 over 3


@given(st.lists(st.integers(min_value=0, max_value=200), min_size=1, max_size=16))
def test_shedding_the_excess_leaves_every_replica_within_one_of_even(counts: list[int]) -> None:
    total = sum(counts)
    after = [c - excess(c, counts[:i] + counts[i + 1 :]) for i, c in enumerate(counts)]
    assert all(a <= math.ceil(total / len(counts)) for a in after)
    assert all(a >= 0 for a in after)


def test_board_shows_each_replica_the_others_that_are_live(tmp_path: Path) -> None:
    path = tmp_path / "replicas" / "connections"
    one, two = Board(path), Board(path)  # two processes map the same file
    try:
        one.write(1, 6, at=100.0)
        two.write(2, 2, at=100.5)
        two.write(3, 9, at=100.0 - STALE_AFTER - 0.1)  # a replica that stopped writing
        assert one.peers(1, now=100.6) == [2]
        assert two.peers(2, now=100.6) == [6]
        one.clear(1)
        assert two.peers(2, now=100.6) == []
    finally:
        one.close()
        two.close()


def test_a_replica_over_its_share_closes_that_many_responses_until_the_next_tick(tmp_path: Path) -> None:
    board = Board(tmp_path / "connections")
    held = {"r1": 6, "r2": 2}
    r1 = ConnectionBalance(board, 1, lambda: held["r1"], clock=lambda: 10.0)
    r2 = ConnectionBalance(board, 2, lambda: held["r2"], clock=lambda: 10.0)
    try:
        assert r2.tick() == 0
        assert r1.tick() == 2
        assert [r1.close_this_one() for _ in range(3)] == [True, True, False]
        assert [r2.close_this_one() for _ in range(2)] == [False, False]
        held.update(r1=4, r2=4)  # the two clients reconnected, and the kernel placed both on r2
        r2.tick()
        assert r1.tick() == 0
        assert not r1.closing
    finally:
        board.close()


async def _answered(app: Rebalance) -> list[tuple[bytes, bytes]]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app({"type": "http", "method": "GET", "path": "/healthz", "headers": []}, receive, send)
    return list(sent[0]["headers"])


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def test_rebalance_asks_the_client_to_reconnect_only_while_the_replica_is_over_its_share(
    tmp_path: Path,
) -> None:
    board = Board(tmp_path / "connections")
    balance = ConnectionBalance(board, 1, lambda: 3, clock=lambda: 5.0)
    app = Rebalance(_ok, balance)
    try:
        board.write(2, 1, at=5.0)
        assert balance.tick() == 1
        assert (b"connection", b"close") in await _answered(app)
        assert (b"connection", b"close") not in await _answered(app)  # one over: one reconnect
        assert await _answered(app) == [(b"content-type", b"text/plain")]
    finally:
        board.close()


async def test_run_leaves_the_board_when_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "connections"
    balance = ConnectionBalance(Board(path), 1, lambda: 5)
    task = asyncio.create_task(balance.run(every=0.01))
    await asyncio.sleep(0.05)
    watcher = Board(path)
    try:
        assert watcher.peers(2, now=time.time()) == [5]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert watcher.peers(2, now=time.time()) == []
    finally:
        watcher.close()
