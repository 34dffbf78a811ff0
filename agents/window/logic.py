"""Working-window trimming: pure, so every edge case is a unit test."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from schemas import TurnEvent, codec
from schemas.memory import CONTEXT_TURNS
from services.core.textutil import count_tokens


@dataclass(frozen=True)
class WindowLimits:
    """When the window is trimmed, and how far.

    A window over either limit is trimmed down to `trim_to` of both (1.0:
    just under the limits). Trimming to the limits evicts one turn per new
    turn once a session is long: an episode of one turn each time, and a
    summarizer, embedder and consolidator pass per turn. Trimming to half
    evicts a run of turns at once, which makes an episode worth reading.

    `jitter` lowers both limits by a share in [0, jitter) that is fixed per
    session (`for_session`): sessions that start together (a launch, an
    import, a bench's users) would otherwise all reach the limit on the same
    turn, and their evictions, episodes and embeddings would land in one
    burst that delays every fresh turn behind it (as Kafka jitters segment
    rolls). A trim still evicts as much as at the full limits (`lowered`
    is taken off the targets too), so a long session trims as often, with
    episodes as long, as without jitter: only the phase moves (a session
    that ends between its own limit and the configured one trims once
    more). The limits stay upper bounds, and a replay trims where the first
    run did.
    """

    max_tokens: int
    max_turns: int
    keep_last: int
    trim_to: float = 1.0
    jitter: float = 0.0
    lowered: tuple[int, int] = (0, 0)  # (tokens, turns) for_session took off the configured limits

    def for_session(self, tenant_id: str, user_id: str, session_id: str) -> WindowLimits:
        """These limits as one session has them: lowered by its own share of `jitter`."""
        if self.jitter <= 0:
            return self
        share = self.jitter * _unit(tenant_id, user_id, session_id)
        tokens, turns = round(self.max_tokens * share), round(self.max_turns * share)
        tokens, turns = min(tokens, self.max_tokens - 1), min(turns, self.max_turns - 1)
        return replace(
            self,
            max_tokens=self.max_tokens - tokens,
            max_turns=self.max_turns - turns,
            jitter=0.0,
            lowered=(tokens, turns),
        )

    def targets(self) -> tuple[int, int]:
        """The tokens and turns a window over a limit is cut down to."""
        tokens, turns = self.lowered
        return (
            max(0, int((self.max_tokens + tokens) * self.trim_to) - tokens),
            max(1, int((self.max_turns + turns) * self.trim_to) - turns),
        )


def _unit(*parts: str) -> float:
    """A number in [0, 1) fixed by `parts`, the same in every process and run (unlike `hash`)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class WindowUpdate:
    window: list[TurnEvent]
    evicted: list[TurnEvent]
    duplicate: bool = False


def window_tokens(turns: list[TurnEvent]) -> int:
    return sum(count_tokens(t.content) for t in turns)


def append_turn(window: list[TurnEvent], turn: TurnEvent, limits: WindowLimits) -> WindowUpdate:
    """Append `turn` (once: a redelivered event changes nothing) and trim.

    The first turn (it usually frames the conversation) and the last
    `keep_last` turns are never evicted, even when they alone exceed the
    budget; eviction takes the oldest of the rest first.
    """
    if any(t.event_id == turn.event_id for t in window):
        return WindowUpdate(window=window, evicted=[], duplicate=True)
    turns = sorted([*window, turn], key=lambda t: (t.turn_index, t.ts))
    return trim(turns, limits)


def preceding(window: list[TurnEvent], turn: TurnEvent, n: int = CONTEXT_TURNS) -> list[TurnEvent]:
    """The last `n` turns of the window (before `turn` is added) that come before it, oldest first.

    The window keeps at least the last few turns (keep_last), so the turns
    just before a new one are there unless the session was closed (then its
    window is empty and the turn starts without context). A replay rebuilds
    the same windows, so the same turn gets the same context.
    """
    order = (turn.turn_index, turn.ts)
    earlier = [t for t in window if (t.turn_index, t.ts) < order and t.event_id != turn.event_id]
    earlier.sort(key=lambda t: (t.turn_index, t.ts))
    return earlier[-n:] if n > 0 else []


def trim(turns: list[TurnEvent], limits: WindowLimits) -> WindowUpdate:
    protected_tail = max(limits.keep_last, 0)
    kept = list(turns)
    evicted: list[TurnEvent] = []
    tokens = window_tokens(kept)
    if len(kept) <= limits.max_turns and tokens <= limits.max_tokens:
        return WindowUpdate(window=kept, evicted=[])
    max_tokens, max_turns = limits.targets()
    # Index 1 is the oldest evictable turn while more than first + tail remain.
    while len(kept) > 1 + protected_tail and (len(kept) > max_turns or tokens > max_tokens):
        dropped = kept.pop(1)
        tokens -= count_tokens(dropped.content)
        evicted.append(dropped)
    return WindowUpdate(window=kept, evicted=evicted)


def split_by_size(turns: list[TurnEvent], max_bytes: int, envelope: int = 1024) -> list[list[TurnEvent]]:
    """Consecutive runs of turns whose serialized size stays under `max_bytes`.

    An evicted chunk is one Kafka message; a long session of long turns
    (CJK text is 3 bytes a character) can exceed the broker's limit. Every
    turn is far below it on its own (content is capped at ingest).
    """
    parts: list[list[TurnEvent]] = []
    size = envelope
    for turn in turns:
        turn_size = len(codec.dumps(turn)) + 2  # bytes, as produced: CJK is 3 a character
        if parts and size + turn_size <= max_bytes:
            parts[-1].append(turn)
            size += turn_size
        else:
            parts.append([turn])
            size = envelope + turn_size
    return parts
