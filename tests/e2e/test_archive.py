"""The encrypted archive and the sealed changes through the real embedded stack: every accepted turn and every
memory change sealed per user, and forgetting a user reaches the log.

Two users talk; the archive holds both, sealed, and so does memory.changes. User A is forgotten through the
API. Then, with fresh consumers, every topic of topics.yaml is read from its beginning, decrypting what can be
decrypted (the archive and memory.changes, with the users' keys), and searched for A's words; Postgres and the
index are asked about A; the archive is replayed the way a rebuild would, which must yield B's events and none
of A's; and `memstream changes` prints B's changes and none of A's.

What the log cannot forget: Kafka cannot delete records before their retention does. Topics that keep
records for at most `chat.turns`' retention (7 days: chat.turns itself, which holds raw turns as producers
sent them, and the pipeline's intermediate topics) still hold A's words in the clear until then; that is
stated here, in topics.yaml and in docs/operations/forgetting.md, and allowed below. Nothing longer-lived may hold them.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from ops.topics import load_specs
from schemas import SessionEvent, TurnEvent, chat_event_adapter
from services.archive import KeyStore, ReplayStats, archived_events, load_master_key, open_changes, read_topic
from services.archive.master import master_key_path
from services.core import generations, topics
from services.core.config import Settings
from services.rebuild.index import edge_path, model_dimension
from services.stores.postgres import PgPool
from services.stores.qdrant_edge_index import EdgeIndex
from tests.stack import (
    ROOT,
    Stack,
    embedded_stack,
    produce,
    run_cli,
    session_end,
    stack_settings,
    turn,
    user_path,
    wait_for,
)
from tests.user_rows import rows_naming

pytestmark = pytest.mark.e2e
TENANT = "arc-acme"


@pytest.fixture(scope="module")
def archive_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    slow_ok = {"MEMSTREAM_HTTP_REQUEST_TIMEOUT": "15", "MEMSTREAM_COMMAND_WAIT_TIMEOUT": "12"}
    with embedded_stack(Path(tmp_path_factory.mktemp("archive")), extra_env=slow_ok) as running:
        yield running


@dataclass
class Scan:
    """What fresh consumers found after A was forgotten."""

    holding_a: dict[str, int]  # topic → records where A's words are readable (raw or decrypted)
    short_lived: set[str]  # topics that keep records no longer than chat.turns
    replayed: list[TurnEvent | SessionEvent]
    stats: ReplayStats
    b_events: list[TurnEvent | SessionEvent]
    a_archived: int
    changes_skipped: Counter[str]  # memory.changes messages that did not open, by reason
    b_changes_readable: int  # B's opened changes that hold B's words: the opener does open what it may
    cli: subprocess.CompletedProcess[str]  # `memstream changes --from-beginning --tenant …`
    word_a: str
    word_b: str


def marker(name: str) -> str:
    """A word that occurs nowhere but in one user's turns (ASCII, so JSON never escapes it)."""
    return f"{name}{uuid.uuid4().hex[:12]}"


def conversation(user: str, word: str, turns: int) -> list[dict[str, Any]]:
    said = [
        f"My name is Sam and I live in {word}ville.",
        f"I love {word} tea and I hate coffee.",
        f"I work as a {word} engineer at a bakery.",
    ]
    events = [turn(TENANT, user, f"{user}-s1", i, said[i % len(said)]) for i in range(turns)]
    return [*events, session_end(TENANT, user, f"{user}-s1")]


async def replay(settings: Settings, pool: PgPool) -> tuple[list[TurnEvent | SessionEvent], ReplayStats]:
    stats = ReplayStats()
    keys = KeyStore.from_settings(pool, settings)
    return [e async for e in archived_events(settings, keys, stats=stats)], stats


async def opened_changes(settings: Settings, pool: PgPool) -> tuple[list[str], Counter[str]]:
    """memory.changes from the beginning, opened as subscribers open it (JSON per change), and what was skipped."""
    keys = KeyStore.from_settings(pool, settings)
    found: list[str] = []
    skipped: Counter[str] = Counter()
    async for batch in read_topic(settings, topics.CHANGES):
        opened, missed = await open_changes(keys, [r.value for r in batch])
        found += [orjson.dumps(c.model_dump(mode="json")).decode() for c in opened]
        skipped.update(missed)
    return found, skipped


def changes_cli(stack: Stack) -> subprocess.CompletedProcess[str]:
    return cli(stack, "changes", "--from-beginning", "--tenant", TENANT, "--idle", "5")


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(stack.env, *args)


async def records_holding(settings: Settings, topic: str, word: bytes) -> int:
    """Records of `topic`, read from the beginning by a consumer of its own, whose key, value or headers hold `word`."""
    found = 0
    async for batch in read_topic(settings, topic):
        for r in batch:
            found += any(word in part for part in (r.key or b"", r.value or b"", *(v for _, v in r.headers or ())))
    return found


@pytest.fixture(scope="module")
async def forgotten(archive_stack: Stack) -> AsyncIterator[Scan]:
    stack, settings = archive_stack, stack_settings(archive_stack)
    user_a, user_b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    word_a, word_b = marker("zanzibar"), marker("quokka")
    a_events, b_events = conversation(user_a, word_a, 3), conversation(user_b, word_b, 2)
    await produce(stack.bootstrap, a_events + b_events)
    pool = PgPool(settings.pg_dsn, 2)
    await pool.open()
    try:
        # The window stage sends a turn's archive record with its candidates, so once memories exist, so does it.
        wait_for(lambda: len(stack.memories(TENANT, user_a)) >= 3, 90, "A's memories")
        wait_for(lambda: len(stack.memories(TENANT, user_b)) >= 2, 90, "B's memories")
        # Both users' turns are in the archive, sealed, each opened with its own user's key.
        before, _ = await replay(settings, pool)
        parsed = [chat_event_adapter.validate_python(e) for e in a_events + b_events]
        assert sorted(before, key=lambda e: e.event_id) == sorted(parsed, key=lambda e: e.event_id)
        assert await records_holding(settings, topics.ARCHIVE, word_a.encode()) == 0  # sealed, not in clear
        assert rows_naming(settings.pg_dsn, TENANT, user_a).get("user_keys") == 1

        # Forget A (the operator key; wait until Postgres and the index show it).
        response = stack.request(
            "DELETE", f"/v1/users/{user_path(user_a)}", params={"tenant_id": TENANT, "wait": "true"}
        )
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "applied"

        # Nothing of A in Postgres (their data key included) or through the read service (the index).
        assert rows_naming(settings.pg_dsn, TENANT, user_a) == {}
        recall = stack.recall(TENANT, user_a, f"where does Sam live? {word_a}", record_access=False)
        assert recall["memories"] == []
        assert word_a not in orjson.dumps(recall).decode()
        assert stack.memories(TENANT, user_b)

        # Every topic, from the beginning, by fresh consumers.
        specs = load_specs(ROOT / "topics.yaml")
        turns_retention = next(s.retention_ms for s in specs if s.name == topics.TURNS)
        counts = await asyncio.gather(*(records_holding(settings, s.name, word_a.encode()) for s in specs))
        holding = {s.name: n for s, n in zip(specs, counts, strict=True) if n}
        replayed, stats = await replay(settings, pool)
        opened = sum(word_a in orjson.dumps(e.model_dump(mode="json")).decode() for e in replayed)
        if opened:
            holding[topics.ARCHIVE] = holding.get(topics.ARCHIVE, 0) + opened
        changes, skipped = await opened_changes(settings, pool)
        if opened_a := sum(word_a in c for c in changes):
            holding[topics.CHANGES] = holding.get(topics.CHANGES, 0) + opened_a
        cli = await asyncio.to_thread(changes_cli, stack)
        print(
            f"records holding the forgotten user's words, by topic: {holding}; replay: {stats}; "
            f"memory.changes opened: {len(changes)}, skipped: {dict(skipped)}; cli: {cli.stderr.splitlines()[-1:]}"
        )
        yield Scan(
            holding_a=holding,
            short_lived={s.name for s in specs if 0 <= s.retention_ms <= turns_retention},
            replayed=replayed,
            stats=stats,
            b_events=[chat_event_adapter.validate_python(e) for e in b_events],
            a_archived=len(a_events),
            changes_skipped=skipped,
            b_changes_readable=sum(word_b in c for c in changes),
            cli=cli,
            word_a=word_a,
            word_b=word_b,
        )
    finally:
        await pool.close()


def test_the_master_key_was_generated_into_the_data_dir_readable_by_its_owner_only(archive_stack: Stack) -> None:
    path = master_key_path(stack_settings(archive_stack))
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_master_key(stack_settings(archive_stack)).key_id


def test_a_replay_of_the_archive_yields_the_other_users_events_only_and_counts_the_forgotten(forgotten: Scan) -> None:
    assert forgotten.replayed == forgotten.b_events
    assert forgotten.stats.forgotten == forgotten.a_archived  # skipped, counted, no error
    assert forgotten.stats.unreadable == 0
    assert forgotten.stats.duplicates == 0


def test_no_topic_that_outlives_chat_turns_holds_anything_readable_of_the_forgotten_user(forgotten: Scan) -> None:
    # chat.turns keeps raw turns for its retention (7 days) and deleting them from a Kafka log before then is
    # not possible; the same holds for the intermediate topics with that retention. They are allowed to hold A.
    assert topics.TURNS in forgotten.short_lived
    assert topics.TURNS in forgotten.holding_a  # the test can see A's words where they are
    assert topics.ARCHIVE not in forgotten.holding_a
    long_lived = set(forgotten.holding_a) - forgotten.short_lived
    assert long_lived == set(), forgotten.holding_a


def test_memory_changes_holds_nothing_readable_of_the_forgotten_user(forgotten: Scan) -> None:
    # Neither in clear nor opened with every key there is: A's changes were sealed with A's key, now deleted.
    assert topics.CHANGES not in forgotten.holding_a, forgotten.holding_a
    assert forgotten.changes_skipped["forgotten"] >= 3  # A's changes: on the log, skipped, counted
    assert forgotten.changes_skipped["unreadable"] == 0 == forgotten.changes_skipped["malformed"]
    assert forgotten.b_changes_readable >= 2  # the other user's changes open, words and all


def test_the_changes_cli_prints_the_other_users_changes_and_the_forget_but_nothing_of_the_forgotten_user(
    forgotten: Scan,
) -> None:
    cli = forgotten.cli
    assert cli.returncode == 0, cli.stderr
    printed = [orjson.loads(line) for line in cli.stdout.splitlines()]
    assert all(c["tenant_id"] == TENANT for c in printed)
    assert forgotten.word_a not in cli.stdout
    assert any(forgotten.word_b in c["record"]["text"] for c in printed if c["op"] != "forgotten")
    (gone,) = [c for c in printed if c["op"] == "forgotten"]  # A's forget, in clear: ids only
    assert "record" not in gone
    assert not [c for c in printed if c["user_id"] == gone["user_id"] and c["op"] != "forgotten"]
    assert f"{len(printed)} changes printed; skipped: forgotten=" in cli.stderr


async def test_a_generation_rebuilt_after_the_forget_holds_nothing_of_the_forgotten_user_anywhere(
    archive_stack: Stack, forgotten: Scan
) -> None:
    """The full rebuild: every memory derived again from the archive, into a generation of its own."""
    stack, settings = archive_stack, stack_settings(archive_stack)
    user_a = next(c["user_id"] for c in map(orjson.loads, forgotten.cli.stdout.splitlines()) if c["op"] == "forgotten")
    user_b = forgotten.b_events[0].user_id
    done = await asyncio.to_thread(cli, stack, "rebuild", "generation", "after", "--from", "archive")
    assert done.returncode == 0, done.stderr
    scoped = generations.scoped(settings, "after")
    try:
        # Postgres: the generation's schema has B and nothing of A.
        assert rows_naming(scoped.pg_dsn, TENANT, user_a) == {}
        assert rows_naming(scoped.pg_dsn, TENANT, user_b).get("memories", 0) >= 2
        # The index the rebuild wrote (its worker has stopped; nothing else holds the shard unless it serves).
        shard = EdgeIndex(edge_path(scoped))
        await shard.ensure(model_dimension(settings))
        try:
            assert await shard.count_scope(TENANT, user_a) == 0
            assert await shard.count_scope(TENANT, user_b) >= 2
        finally:
            await shard.close()
        # Every topic of the generation, raw and opened with every key there is.
        own = list(generations.Generation("after").own_topics().values())
        counts = await asyncio.gather(*(records_holding(settings, t, forgotten.word_a.encode()) for t in own))
        assert dict(zip(own, counts, strict=True)) == dict.fromkeys(own, 0)
        pool = PgPool(settings.pg_dsn, 2)
        await pool.open()
        try:
            keys = KeyStore.from_settings(pool, settings)
            opened = []
            async for batch in read_topic(settings, generations.Generation("after").topic("changes")):
                opened += (await open_changes(keys, [r.value for r in batch]))[0]
        finally:
            await pool.close()
        texts = orjson.dumps([c.model_dump(mode="json") for c in opened]).decode()
        assert forgotten.word_a not in texts
        assert forgotten.word_b in texts  # B's changes open: the search would have found A's
    finally:
        assert (await asyncio.to_thread(cli, stack, "generation", "drop", "after")).returncode == 0


@pytest.fixture
def crashing_stack(tmp_path: Path) -> Iterator[Stack]:
    """Killed once right after the window stage's commit (outbox unsent) and once right after its publish."""
    crash_at = {"window.after_commit": 2, "window.after_publish": 4}
    extra = {"MEMSTREAM_CRASH_POINTS": orjson.dumps(crash_at).decode()}
    with embedded_stack(tmp_path / "stack", extra_env=extra) as running:
        yield running


async def test_a_crash_in_the_window_stage_neither_loses_an_archive_record_nor_seals_one_twice(
    crashing_stack: Stack,
) -> None:
    stack, settings = crashing_stack, stack_settings(crashing_stack)
    run_dir = stack.data_dir / "run"
    points = ("window.after_commit", "window.after_publish")
    sent: list[dict[str, Any]] = []
    # A crash point fires on its n-th pass in a process: keep turns coming until both have fired.
    for wave in range(60):
        if wave >= 8 and all((run_dir / f"crashed-{p}").exists() for p in points):
            break
        events = conversation(f"crash-{wave % 2}", marker("w"), 3)
        events[-1]["event_id"] = f"end-{wave}"  # one session per user: each wave's end is an event of its own
        sent += events
        await produce(stack.bootstrap, events)
        await asyncio.sleep(2.0)
    assert all((run_dir / f"crashed-{p}").exists() for p in points), "a crash point never fired"
    expected = sorted(chat_event_adapter.validate_python(e).event_id for e in sent)
    pool = PgPool(settings.pg_dsn, 2)
    await pool.open()
    try:
        replayed: list[TurnEvent | SessionEvent] = []
        for _ in range(60):  # the restarted app catches up
            replayed, stats = await replay(settings, pool)
            if sorted(e.event_id for e in replayed) == expected:
                break
        raw: dict[str, set[bytes]] = {}
        async for batch in read_topic(settings, topics.ARCHIVE):
            for r in batch:
                raw.setdefault(orjson.loads(r.value)["event_id"], set()).add(r.value)
    finally:
        await pool.close()
    print(f"archive after two crashes: {stats}")
    assert sorted(e.event_id for e in replayed) == expected  # nothing lost, each event yielded once
    # A record sent again after the crash is the outbox row's bytes again, never a second sealing.
    assert {event_id: len(values) for event_id, values in raw.items() if len(values) > 1} == {}
    assert stats.forgotten == stats.unreadable == 0
