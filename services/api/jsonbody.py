"""Request bodies are strict JSON, parsed by orjson, and must say they are JSON.

Starlette parses bodies with Python's `json`, which accepts NaN, Infinity
and lone surrogates (`"\\ud800"`, which no store can encode) and raises
RecursionError on deep nesting. orjson rejects all of them with a
JSONDecodeError (nesting deeper than 1024), which FastAPI turns into a 422
`json_invalid`. A body in another content type is a 415, not a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


def is_json(content_type: str | None) -> bool:
    """`application/json` or any `application/*+json`; parameters (charset) ignored: JSON is UTF-8."""
    if not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None

        async def strict_handler(request: Request) -> Response:
            request = StrictJsonRequest(request.scope, request.receive)
            if takes_body and not is_json(request.headers.get("content-type")) and await request.body():
                raise HTTPException(
                    status_code=415, detail="request body must be JSON (Content-Type: application/json)"
                )
            return await handler(request)

        return strict_handler
