"""The embedder's two lanes: which candidates go first, and what the background lane promises."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from agents.embedder.lanes import BackgroundLane, Item, split
from services.core.backlog import BACKGROUND, READ_SIDE, counts_as_ingest, is_background
from tests.factories import exchange_candidate


@dataclass
class Message:
    """What the lane touches of a Faust message: its headers and its reference count."""

    headers: list[tuple[str, bytes]]
    refcount: int = 1

    def incref(self) -> None:
        self.refcount += 1


@dataclass
class Event:
    message: Message
    acks: list[str] = field(default_factory=list)
    name: str = ""

    def ack(self) -> None:
        self.message.refcount -= 1
        self.acks.append(self.name)


def item(user: str, text: str, background: bool = False) -> Item:
    return Event(Message([BACKGROUND] if background else []), name=text), exchange_candidate(text, user)


def texts(items: list[Item]) -> list[str]:
    return [c.text for _, c in items]


def test_the_background_header_is_told_apart_and_its_wait_is_not_ingest_behind() -> None:
    assert is_background([BACKGROUND])
    assert is_background(dict([BACKGROUND]))
    assert not is_background([READ_SIDE])
    assert not is_background(None)
    assert counts_as_ingest([])
    assert counts_as_ingest([("traceparent", b"00-x")])
    assert not counts_as_ingest([BACKGROUND])
    assert not counts_as_ingest([READ_SIDE])


def test_fresh_candidates_go_first_and_a_user_with_work_queued_waits_behind_it() -> None:
    items = [
        item("a", "episode of a", background=True),
        item("b", "turn of b"),
        item("a", "turn of a"),
        item("c", "turn of c"),
        item("d", "turn of d"),
    ]
    fresh, later = split(items, lambda e: is_background(e.message.headers), Counter({("t", "d"): 1}))
    assert texts(fresh) == ["turn of b", "turn of c"]
    assert texts(later) == ["episode of a", "turn of a", "turn of d"]


@given(
    st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), max_size=30),
    st.sets(st.sampled_from("abcd")),
)
def test_a_split_loses_nothing_and_no_item_overtakes_one_of_its_own_user(
    spec: list[tuple[str, bool]], queued_users: set[str]
) -> None:
    items = [item(user, f"{i}", background) for i, (user, background) in enumerate(spec)]
    queued = Counter({("t", user): 1 for user in queued_users})
    fresh, later = split(items, lambda e: is_background(e.message.headers), queued)
    assert sorted(texts(fresh) + texts(later), key=int) == texts(items)
    assert texts(fresh) == sorted(texts(fresh), key=int)
    assert texts(later) == sorted(texts(later), key=int)
    assert all(not is_background(e.message.headers) for e, _ in fresh)
    for user in "abcd":
        # Fresh goes out first: a user's fresh items must all come before any of theirs held back.
        mine_fresh = [int(c.text) for _, c in fresh if c.user_id == user]
        mine_later = [int(c.text) for _, c in later if c.user_id == user]
        assert not (mine_fresh and mine_later and max(mine_fresh) > min(mine_later))
        assert not (user in queued_users and mine_fresh)


async def test_the_lane_yields_the_model_to_fresh_batches_and_acknowledges_only_what_it_forwarded() -> None:
    handled: list[list[str]] = []
    release = asyncio.Event()

    async def handle(items: list[Item]) -> None:
        handled.append(texts(items))
        if len(handled) == 1:
            await release.wait()  # the first call is still in the model

    lane = BackgroundLane(handle, stage="embedder", capacity=10, batch=2, max_delay=0.1)
    runner = asyncio.create_task(lane.run())
    items = [item("a", "e1", True), item("a", "e2", True), item("b", "e3", True)]
    try:
        with lane.fresh():  # a fresh batch holds the model: nothing of the lane starts
            await lane.put(items)
            await asyncio.sleep(0.05)
            assert handled == []
            assert all(e.message.refcount == 2 for e, _ in items)  # held past its batch's acknowledgement
            assert lane.split([item("a", "turn of a"), item("c", "turn of c")])[1][0][1].text == "turn of a"
        await asyncio.sleep(0.05)
        assert handled == [["e1", "e2"]]  # batches of `batch`, in arrival order
        assert all(not e.acks for e, _ in items)  # nothing acknowledged before it was forwarded
        release.set()
        for _ in range(100):
            if len(handled) == 2 and items[2][0].acks:
                break
            await asyncio.sleep(0.01)
        assert handled == [["e1", "e2"], ["e3"]]
        assert [e.acks for e, _ in items] == [["e1"], ["e2"], ["e3"]]
        assert lane.split([item("a", "turn of a")])[0]  # nothing of a's queued any more: fresh again
    finally:
        runner.cancel()


async def test_the_lane_retries_a_batch_that_failed_and_acknowledges_it_once() -> None:
    calls: list[list[str]] = []

    async def handle(items: list[Item]) -> None:
        calls.append(texts(items))
        if len(calls) == 1:
            raise RuntimeError("a bug, not bad data")

    lane = BackgroundLane(handle, stage="embedder", capacity=10, batch=8, max_delay=0.1)
    runner = asyncio.create_task(lane.run())
    event, cand = item("a", "e1", True)
    try:
        await lane.put([(event, cand)])
        for _ in range(200):
            if event.acks:
                break
            await asyncio.sleep(0.01)
        assert calls == [["e1"], ["e1"]]
        assert event.acks == ["e1"]
        assert event.message.refcount == 1
    finally:
        runner.cancel()
