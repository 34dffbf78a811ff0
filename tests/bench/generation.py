"""Generation rebuild rate: `memstream rebuild generation` over the archive of the run just made.

Run as a user runs it (the CLI, against the live stack, with the stack's
environment), timed end to end: the worker's start-up, the whole archive
through every stage, and the drain check's settle time are all in it. The
figures come from the generation's registry row, which the rebuild fills;
the generation is dropped afterwards so the rest of the run is unaffected.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any

import psycopg

from tests.stack import ROOT

NAME = "bench"


async def _cli(env: Mapping[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli",
        *args,
        env=dict(env),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    return proc.returncode or 0, output.decode(errors="replace")


async def rebuild(env: Mapping[str, str], dsn: str, live_turns_per_s: float | None, out: dict[str, Any]) -> None:
    code, output = await _cli(env, "rebuild", "generation", NAME, "--from", "archive")
    if code != 0:
        out["error"] = output[-1000:]
        return
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT detail FROM public.generations WHERE name = %s", (NAME,)).fetchone()
        detail: dict[str, Any] = row[0] if row else {}
        out.update({k: v for k, v in detail.items() if k in ("archived", "events", "memories", "active", "seconds")})
        out["turns_per_s"] = out["events"] / out["seconds"]
        if live_turns_per_s:
            out["ratio_to_live_ingest"] = out["turns_per_s"] / live_turns_per_s
    finally:
        await _cli(env, "generation", "drop", NAME)
