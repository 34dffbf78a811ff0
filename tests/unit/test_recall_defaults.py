"""A recall that leaves out top_k or token_budget takes the deployment's settings; one that gives them keeps them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.models import RecallRequest
from services.api.recall import with_defaults
from services.core.config import Settings

BASE = {"tenant_id": "t1", "user_id": "u1", "query": "where does the user live?"}


def test_left_out_fields_take_the_settings() -> None:
    settings = Settings(recall_top_k=3, recall_token_budget=500)
    req = with_defaults(RecallRequest.model_validate(BASE), settings)
    assert (req.top_k, req.token_budget) == (3, 500)


def test_fields_the_caller_gives_win_even_when_equal_to_the_model_default() -> None:
    settings = Settings(recall_top_k=3, recall_token_budget=500)
    req = with_defaults(RecallRequest.model_validate({**BASE, "top_k": 10, "token_budget": 2_000}), settings)
    assert (req.top_k, req.token_budget) == (10, 2_000)


def test_default_settings_keep_the_documented_defaults() -> None:
    req = with_defaults(RecallRequest.model_validate(BASE), Settings())
    assert (req.top_k, req.token_budget) == (10, 2_000)


@pytest.mark.parametrize(("field", "value"), [("recall_top_k", 0), ("recall_top_k", 101), ("recall_token_budget", 0)])
def test_settings_outside_what_a_request_may_ask_are_refused(field: str, value: int) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: value})  # type: ignore[arg-type]
