"""Extraction time per turn on the worst inputs: every rule pattern and the whole extract(), each turn at the limit.

    .venv/bin/python -m tests.bench.rules_worst [--cap SECONDS] [--top N]

Prints the slowest (pattern, turn) pairs and the slowest turns for extract()
and candidates_for_turn(), in seconds. A call that runs past `--cap` is
interrupted (SIGALRM; the regex engine checks for signals) and reported as
">cap": before the linear rules, some took minutes.
"""

from __future__ import annotations

import argparse
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FrameType
from typing import Any

from tests.pathological import pathological_turns


class _Overrun(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Overrun


@contextmanager
def _capped(seconds: float) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timed(call: Callable[[], Any], cap: float) -> float:
    """Seconds `call` took, or +inf when it ran past `cap`."""
    started = time.perf_counter()
    try:
        with _capped(cap):
            call()
    except _Overrun:
        return float("inf")
    return time.perf_counter() - started


def rule_patterns() -> dict[str, re.Pattern[str]]:
    """Every compiled pattern the rules run on turn content, by a readable name."""
    from agents.rules import extract, patterns

    named = {f"{r.category}/{r.key} #{i}": r.pattern for i, r in enumerate(patterns.FACT_RULES)}
    for module in (patterns, extract):
        named |= {name: value for name, value in vars(module).items() if isinstance(value, re.Pattern)}
    return named


def measure(
    patterns: dict[str, re.Pattern[str]], calls: dict[str, Callable[[str], Any]], cap: float
) -> list[tuple[float, str, str]]:
    """(seconds, what, turn) for every pattern's search and every call, on every pathological turn."""
    out = []
    for turn_name, text in pathological_turns().items():
        for name, pattern in patterns.items():
            out.append((timed(partial(pattern.findall, text), cap), name, turn_name))
        for name, call in calls.items():
            out.append((timed(partial(call, text), cap), name, turn_name))
    return sorted(out, reverse=True)


def _format(seconds: float, cap: float) -> str:
    return f">{cap:g}" if seconds == float("inf") else f"{seconds:.4f}"


def main() -> None:
    from agents.rules.candidates import candidates_for_turn
    from agents.rules.extract import extract
    from tests.factories import turn_event

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=30.0)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    def candidates(text: str) -> Any:
        return candidates_for_turn(turn_event(0, text))

    calls: dict[str, Callable[[str], Any]] = {"extract()": extract, "candidates_for_turn()": candidates}
    rows = measure(rule_patterns(), calls, args.cap)
    for seconds, what, turn in rows[: args.top]:
        print(f"{_format(seconds, args.cap):>9} s  {what:<28} {turn}")
    for name in calls:
        worst = max(r for r in rows if r[1] == name)
        print(f"worst {name}: {_format(worst[0], args.cap)} s on {worst[2]}")


if __name__ == "__main__":
    main()
