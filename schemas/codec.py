"""One place that turns models into bytes and back (orjson)."""

from __future__ import annotations

from typing import TypeVar

import orjson
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def dumps(model: BaseModel) -> bytes:
    return orjson.dumps(model.model_dump(mode="json"))


def loads(model_type: type[M], raw: bytes) -> M:
    return model_type.model_validate(orjson.loads(raw))
