"""rules: inline extraction of facts and preferences, plus the raw exchange.

Invalid turns are skipped here: the window agent reads the same messages and
is the one that sends them to the DLQ, so each bad message lands there once.
"""

from __future__ import annotations

from typing import Any

import faust

from agents.ingest import parse_chat_event
from agents.rules.candidates import candidates_for_turn
from agents.stage import deliver, forward, span
from agents.topics import Topics
from schemas import TurnEvent
from services.errors import InvalidEvent
from services.runtime import Runtime

STAGE = "rules"


def register(app: faust.App, topics: Topics, rt: Runtime) -> None:
    s = rt.settings

    async def extract(turns: list[TurnEvent]) -> None:
        for turn in turns:
            await forward(topics.candidates, STAGE, candidates_for_turn(turn))

    async def rules(stream: Any) -> None:
        async for event in stream.events():
            with span(STAGE, 1):
                try:
                    parsed = parse_chat_event(event.value, max_content_bytes=s.max_content_bytes, tenants=s.tenants)
                except InvalidEvent:
                    continue  # the window stage sends it to the DLQ, once
                if isinstance(parsed, TurnEvent):
                    await deliver([(event, parsed)], extract, topics.dlq, STAGE)

    app.agent(topics.turns, name="rules")(rules)
