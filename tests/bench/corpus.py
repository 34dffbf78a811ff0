"""Deterministic synthetic chat: fixed seeds, so every run measures the same corpus.

Lengths follow chat, not prose: user turns mostly 5-40 words, assistant turns
longer; about one user turn in five states a preference or a profile fact so
the rules stage does real work.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from datetime import UTC, datetime
from typing import Any

from tests.stack import session_end, turn

WORDS = (
    "the a I my we you it this that some about after before with for from into over today tomorrow yesterday "
    "coffee tea Berlin work project meeting dog cat music running book movie family weekend trip dinner code "
    "python garden bike train morning evening friend sister brother plan idea market school office deadline "
    "concert recipe soup bread hiking lake mountain beach photo camera guitar piano lesson exam report budget "
    "doctor gym yoga swim bus flight hotel museum painting novel podcast game team client launch review bug"
).split()
SUBJECTS = "coffee tea jazz hiking sushi novels yoga chess podcasts cycling pottery baking".split()
CITIES = "Berlin Lisbon Austin Pune Osaka Toronto Nairobi Oslo Denver Hanoi".split()
JOBS = "nurse teacher engineer designer chef pilot lawyer farmer writer baker".split()


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(words).capitalize() + "."


def synthetic_texts(n: int, words: tuple[int, int] = (6, 30), seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng, *words) for _ in range(n)]


def _user_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:
        return f"I really {rng.choice(['like', 'love', 'prefer'])} {rng.choice(SUBJECTS)}. {sentence(rng, 4, 20)}"
    if roll < 0.15:
        return f"I live in {rng.choice(CITIES)}. {sentence(rng, 4, 15)}"
    if roll < 0.2:
        return f"I work as a {rng.choice(JOBS)}. {sentence(rng, 4, 15)}"
    return sentence(rng, 5, 40)


def conversations(turns: int, users: int, tenant: str = "bench", seed: int = 11) -> list[dict[str, Any]]:
    """`turns` chat turns over `users` users in sessions of 6-40 turns, each closed by session_end.

    Events are interleaved across users as a busy service would send them;
    per user they stay in order.
    """
    rng = random.Random(seed)
    run = uuid.UUID(int=rng.getrandbits(128)).hex[:6]
    now = datetime.now(UTC)
    per_user: list[deque[dict[str, Any]]] = [deque() for _ in range(users)]
    made = 0
    session_no = 0
    while made < turns:
        u = session_no % users
        user, session = f"u{u:03d}-{run}", f"s{session_no:05d}-{run}"
        session_no += 1
        length = min(rng.randint(6, 40), turns - made)
        for i in range(length):
            role = "user" if i % 2 == 0 else "assistant"
            text = _user_text(rng) if role == "user" else sentence(rng, 15, 80)
            # Deterministic ids: the run id in the session name keeps them unique.
            per_user[u].append(
                {**turn(tenant, user, session, i, text, role, now, corpus="bench"), "event_id": f"{session}-{i}"}
            )
        made += length
        per_user[u].append(session_end(tenant, user, session, now))
    out: list[dict[str, Any]] = []
    while any(per_user):
        for queue in per_user:
            if queue:
                out.append(queue.popleft())
    return out


def turn_ids(events: list[dict[str, Any]]) -> set[str]:
    return {e["event_id"] for e in events if e.get("type") != "session_end"}
