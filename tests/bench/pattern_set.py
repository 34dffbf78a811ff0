"""The labelled set for pattern detection: users with assistant-style sessions, and which sessions share a theme.

Each user (24 per half, the halves drawing on disjoint themes, see
tests/bench/pattern_themes.py) has

- a primary theme over 2 to 8 sessions (around `pattern_min_episodes`; the
  issue's case, six sessions planning a trip to Japan, is user a00);
- for two users in three, a second theme over 2 to 6 sessions;
- a near miss of the primary theme, when it has one (1 or 2 sessions on its
  vocabulary-sharing partner: Japanese cooking beside a trip to Japan);
- one session of another theme, and two one-off requests;

and 4 users per half talk about one theme only (5 to 8 sessions, and one
one-off request): the user of the issue, whose history has no background of
other subjects to stand out from.

Sessions are wrapped in assistant filler at three levels (bare, usual, heavy:
greetings, "Happy to help!", "Anything else?", thanks) and come in a shuffled
order a day apart. The label of a session is its theme; one-offs have a label
of their own. Everything is derived from a seed per user, so the set is the
same on every run.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from schemas import Role, TurnEvent
from tests.bench.pattern_themes import (
    CLOSERS,
    FOLLOW_UP_ANSWERS,
    GREETINGS,
    HALF_A,
    HALF_B,
    NEAR_MISS,
    ONE_OFFS_A,
    ONE_OFFS_B,
    OPENERS,
    REPLIES_TO_GREETING,
    THANKS,
    Session,
)

USERS_PER_HALF = 24
FOCUSED_FROM = 20  # users from here on talk about one theme only (and one one-off request)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TENANT = "bench"
PRIMARY_SESSIONS = [6, 3, 5, 8, 4, 7, 5, 2, 6, 4]
SECONDARY_SESSIONS = [5, 3, 6, 4, 2]


@dataclass(frozen=True)
class LabelledSession:
    session_id: str
    theme: str  # a theme of pattern_themes, or "one-off:N" (a label no other session has)
    turns: tuple[TurnEvent, ...]


@dataclass(frozen=True)
class User:
    user_id: str
    half: str
    sessions: tuple[LabelledSession, ...]

    def themes(self) -> dict[str, set[str]]:
        """Session ids by theme label, one-offs included."""
        by_theme: dict[str, set[str]] = defaultdict(set)
        for s in self.sessions:
            by_theme[s.theme].add(s.session_id)
        return dict(by_theme)


def dialogue(core: Session, filler: int, rng: random.Random) -> list[tuple[Role, str]]:
    """The session's turns: its substance, wrapped in filler at `filler` level 0 (bare), 1 (usual) or 2 (heavy)."""
    ask, answer, follow_up = core
    turns: list[tuple[Role, str]] = []
    if filler >= 2:
        turns += [(Role.USER, rng.choice(GREETINGS)), (Role.ASSISTANT, rng.choice(REPLIES_TO_GREETING))]
    opener = rng.choice(OPENERS) + " " if filler >= 1 else ""
    turns += [
        (Role.USER, ask),
        (Role.ASSISTANT, opener + answer),
        (Role.USER, follow_up),
        (Role.ASSISTANT, rng.choice(FOLLOW_UP_ANSWERS)),
    ]
    if filler >= 1:
        turns += [(Role.USER, rng.choice(THANKS)), (Role.ASSISTANT, rng.choice(CLOSERS))]
    if filler >= 2:
        turns += [(Role.USER, "no that's all for now"), (Role.ASSISTANT, "Happy to help! Have a great day!")]
    return turns


def user(half: str, n: int) -> User:
    themes, one_offs = (HALF_A, ONE_OFFS_A) if half == "a" else (HALF_B, ONE_OFFS_B)
    names = list(themes)
    rng = random.Random(f"patterns-{half}{n}")
    primary = names[n % len(names)]
    if n >= FOCUSED_FROM:
        plan = [(primary, c) for c in rng.sample(themes[primary], 5 + n % 4)]
        plan.append((f"one-off:{n % len(one_offs)}", one_offs[n % len(one_offs)]))
        return labelled_user(half, n, plan, rng)
    plan = [(primary, c) for c in rng.sample(themes[primary], PRIMARY_SESSIONS[n % 10])]
    used = {primary}
    near = NEAR_MISS.get(primary)
    if near is not None:
        plan += [(near, c) for c in rng.sample(themes[near], 1 + n % 2)]
        used.add(near)
    if n % 3 != 2:
        secondary = rng.choice([t for t in names if t not in used])
        plan += [(secondary, c) for c in rng.sample(themes[secondary], SECONDARY_SESSIONS[n % 5])]
        used.add(secondary)
    other = rng.choice([t for t in names if t not in used])
    plan.append((other, rng.choice(themes[other])))
    plan += [(f"one-off:{one_offs.index(c)}", c) for c in rng.sample(one_offs, 2)]
    return labelled_user(half, n, plan, rng)


def labelled_user(half: str, n: int, plan: list[tuple[str, Session]], rng: random.Random) -> User:
    """The user's sessions: `plan`'s (theme, substance) in a shuffled order, a day apart, wrapped in filler."""
    rng.shuffle(plan)
    user_id = f"{half}{n:02d}"
    sessions = []
    for day, (theme, core) in enumerate(plan):
        session_id = f"{user_id}-s{day:02d}"
        start = T0 + timedelta(days=day, minutes=rng.randrange(600))
        turns = tuple(
            TurnEvent(
                event_id=f"{session_id}-t{i}",
                tenant_id=TENANT,
                user_id=user_id,
                session_id=session_id,
                turn_index=i,
                role=role,
                content=content,
                ts=start + timedelta(seconds=40 * i),
            )
            for i, (role, content) in enumerate(dialogue(core, rng.choice([0, 1, 1, 2]), rng))
        )
        sessions.append(LabelledSession(session_id, theme, turns))
    return User(user_id, half, tuple(sessions))


def labelled_users(half: str | None = None) -> list[User]:
    """The set's users, of one half ("a" or "b") or both."""
    halves = ["a", "b"] if half is None else [half]
    return [user(h, n) for h in halves for n in range(USERS_PER_HALF)]
