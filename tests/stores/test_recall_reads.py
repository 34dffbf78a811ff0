"""Recall's reads from Postgres in one round trip: the same answers as one read at a time, scoped, one flight.

Round trips are counted on the wire: the pool talks to Postgres through a
byte-forwarding proxy that counts the client's flights (a send that follows
the server's last reply). Pipelined statements leave in one flight; reads
one after another take one flight each.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from schemas import MemoryRecord, MemoryStatus, MemoryType
from services.core.pgpass import read_password
from services.stores.postgres import MemoryReader, MemoryWriter, PgPool, WindowStore, migrate
from services.stores.postgres.memory_reads import LiveHit
from tests.factories import turn_event
from tests.store_reads import open_questions
from tests.stores.test_postgres import memory
from tests.unit.test_questions import question_record

CLOSE = [1.0, 0.0, 0.0]


class FlightCounter:
    """A TCP proxy in front of Postgres that counts how often the client starts talking again."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._last_from_client = False
        self.flights = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def reset(self) -> None:
        self.flights, self._last_from_client = 0, False

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, from_client: bool) -> None:
        try:
            while data := await src.read(65536):
                if from_client and not self._last_from_client:
                    self.flights += 1
                self._last_from_client = from_client
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._upstream)
        await asyncio.gather(self._pump(client_r, server_w, True), self._pump(server_r, client_w, False))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


@dataclass
class Counted:
    pool: PgPool
    wire: FlightCounter


@pytest.fixture
async def counted(pg_dsn: str) -> AsyncIterator[Counted]:
    await migrate(pg_dsn)
    info = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    wire = FlightCounter(str(info["host"]), int(str(info["port"])))
    port = await wire.start()
    # The passfile names the real port; through the proxy the password is given as it is.
    password = read_password(Path(str(info["passfile"])))
    pool = PgPool(psycopg.conninfo.make_conninfo(pg_dsn, port=port, passfile=None, password=password), 1)
    await pool.open()
    yield Counted(pool, wire)
    await pool.close()
    await wire.close()


@dataclass(frozen=True)
class Seeded:
    fact: MemoryRecord
    hit: MemoryRecord
    gone: MemoryRecord
    theirs: MemoryRecord
    question: MemoryRecord


async def _seed(pool: PgPool) -> Seeded:
    writer, windows = MemoryWriter(), WindowStore(pool)
    fact = memory("User lives in Lisbon", type_=MemoryType.FACT, category="location", key_name="city", value="Lisbon")
    far = memory("User preference: green tea", type_=MemoryType.PREFERENCE)
    hit = memory("We talked about the tram to Belem", access_count=3)
    gone = memory("An old note", status=MemoryStatus.SUPERSEDED)
    theirs = memory("User lives in Porto", user="other", type_=MemoryType.FACT)
    question = question_record()
    async with pool.transaction("seed") as conn:
        await writer.upsert(conn, fact, CLOSE)
        await writer.upsert(conn, far, [0.0, 1.0, 0.0])
        await writer.upsert(conn, hit, [0.0, 0.0, 1.0])
        await writer.upsert(conn, gone, [0.0, 0.0, 1.0])
        await writer.upsert(conn, theirs, CLOSE)
        await writer.upsert(conn, question, [0.0, 1.0, 0.0])
        await windows.save_window(conn, "t", "u", "s", [turn_event(0, "hello"), turn_event(1, "hi")], 4)
    return Seeded(fact, hit, gone, theirs, question)


async def test_recall_reads_answer_what_the_single_reads_answer_in_one_flight(counted: Counted) -> None:
    pool, wire = counted.pool, counted.wire
    seeded = await _seed(pool)
    reader, windows = MemoryReader(pool), WindowStore(pool)
    ids = [seeded.hit.id, seeded.gone.id, seeded.theirs.id, "no-such-id"]

    wire.reset()
    reads = await reader.recall_reads(
        "t", "u", hit_ids=ids, query=CLOSE, min_similarity=0.5, profile_limit=3, questions_limit=50, session_id="s"
    )
    assert wire.flights == 1

    wire.reset()
    profile = await reader.active_profile("t", "u", CLOSE, 0.5, limit=3)
    questions = await open_questions(pool, "t", "u", limit=50)
    window = await windows.working_window("t", "u", "s")
    assert wire.flights == 3

    # Only the user's active hits, with their access as Postgres holds it.
    assert {i: (h.access_count, h.last_accessed_at) for i, h in reads.hits.items()} == {seeded.hit.id: (3, None)}
    # The hit as recall shows it: what the record says, read from the row.
    assert reads.hits == {seeded.hit.id: LiveHit.of(seeded.hit)}
    assert reads.profile == profile
    assert [(r.id, round(sim, 3)) for r, sim in reads.profile] == [(seeded.fact.id, 1.0)]
    assert reads.questions == questions == [seeded.question]
    assert reads.window == window
    assert reads.window is not None
    assert reads.window["window_tokens"] == 4


async def test_recall_reads_leave_out_what_is_not_asked_for(counted: Counted) -> None:
    await _seed(counted.pool)
    counted.wire.reset()
    reads = await MemoryReader(counted.pool).recall_reads(
        "t", "u", hit_ids=[], query=CLOSE, min_similarity=0.5, profile_limit=3
    )
    assert counted.wire.flights == 1
    assert (reads.hits, reads.questions, reads.window) == ({}, [], None)
    assert len(reads.profile) == 1


@pytest.mark.parametrize(("tenant", "user"), [("t", "other"), ("x", "u")])
async def test_recall_reads_are_scoped_by_tenant_and_user(counted: Counted, tenant: str, user: str) -> None:
    seeded = await _seed(counted.pool)
    reads = await MemoryReader(counted.pool).recall_reads(
        tenant,
        user,
        hit_ids=[seeded.hit.id, seeded.fact.id],
        query=CLOSE,
        min_similarity=0.0,
        profile_limit=10,
        questions_limit=50,
        session_id="s",
    )
    assert reads.hits == {}
    assert reads.questions == []
    assert reads.window is None
    assert [r.id for r, _ in reads.profile] == ([seeded.theirs.id] if user == "other" and tenant == "t" else [])
