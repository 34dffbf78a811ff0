"""One async client for any OpenAI-compatible chat endpoint, with failure handling we control.

The `openai` package's own retries are off (`max_retries=0`): we retry
transient failures ourselves (timeouts, 408, 429, 5xx, connection errors) with
capped backoff, so every retry is counted and classified. A JSON answer is
validated against a pydantic model; an invalid or truncated one gets exactly
one repair round trip (the error goes back to the model), then the call ends
as `Fallback("invalid_output", raw_output)`. Callers then use the rule or
extractive path and dead-letter the raw output: an LLM failure never drops
an input and never stops a stage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, Union, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import BaseModel, ValidationError

from services.core.config import Settings
from services.core.metrics import LLM as metrics

log = logging.getLogger(__name__)

A = TypeVar("A", bound=BaseModel)
V = TypeVar("V")

Message = dict[str, str]
# A semantic check beyond the schema (e.g. "target id is one of the neighbours"): an error text, or None.
Check = Callable[[A], str | None]

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_MAX_ERROR_CHARS = 600


@dataclass(frozen=True)
class Ok(Generic[V]):
    value: V
    # True when the first answer was invalid and the repair round trip fixed it.
    repaired: bool = False


@dataclass(frozen=True)
class Fallback:
    """The LLM gave nothing usable; the caller takes its rule/extractive path.

    `reason` is a metric result label: invalid_output (the model answered,
    badly, twice), timeout, rate_limited, server_error, unavailable
    (connection failed) or client_error (a 4xx retrying cannot fix).
    """

    reason: str
    error: str
    raw_output: str | None = None

    @property
    def dead_letter(self) -> bool:
        """Only a bad answer is data worth keeping; an outage is not (an outage only delays)."""
        return self.reason == "invalid_output"

    def describe(self, operation: str) -> str:
        """For the DLQ error header: what failed first, then the raw output (the header is truncated)."""
        return f"llm {operation}: {self.reason}: {self.error[:_MAX_ERROR_CHARS]}; raw output: {self.raw_output or ''}"


Outcome = Union[Ok[V], Fallback]  # noqa: UP007 (a generic alias; `|` cannot be subscripted here)


class _Transient(Exception):
    def __init__(self, result: str, error: str, retry_after: float | None = None) -> None:
        super().__init__(error)
        self.result = result
        self.retry_after = retry_after


class _Permanent(Exception):
    pass


def classify(exc: Exception) -> _Transient | _Permanent | None:
    """Which openai errors are worth retrying; None for anything that is not an API error."""
    if isinstance(exc, openai.APITimeoutError):  # a subclass of APIConnectionError: test it first
        return _Transient("timeout", str(exc))
    if isinstance(exc, openai.APIConnectionError):
        return _Transient("unavailable", str(exc))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"HTTP {status}: {str(exc)[:_MAX_ERROR_CHARS]}"
        if status == 429:
            return _Transient("rate_limited", message, _retry_after(exc.response.headers.get("retry-after")))
        if status == 408:
            return _Transient("timeout", message)
        if status >= 500:
            return _Transient("server_error", message)
        return _Permanent(message)
    return None


def _retry_after(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date: use our own backoff


def backoff(attempt: int, first: float, cap: float, retry_after: float | None = None) -> float:
    """Doubling from `first`, never above `cap`; a server's Retry-After wins when it is shorter than the cap."""
    if retry_after is not None:
        return min(retry_after, cap)
    return float(min(first * 2**attempt, cap))


def strip_fence(raw: str) -> str:
    """Many models wrap JSON in a markdown fence even in JSON mode; that is not worth a repair."""
    match = _FENCE.match(raw)
    return match.group(1) if match else raw


def parse_answer(raw: str, answer: type[A], check: Check[A] | None, truncated: bool) -> A | str:
    """The validated answer, or the error text the repair prompt sends back."""
    try:
        value = answer.model_validate_json(strip_fence(raw))
    except ValidationError as exc:
        if truncated:
            return "the answer was cut off at the token limit (truncated JSON); answer again, more briefly"
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:5])
        return f"not valid JSON for the schema: {problems}"
    problem = check(value) if check is not None else None
    return problem if problem is not None else value


def schema_instruction(answer: type[BaseModel]) -> str:
    schema = json.dumps(answer.model_json_schema(), separators=(",", ":"))
    return f"Reply with exactly one JSON object, no prose, matching this JSON Schema: {schema}"


def repair_messages(messages: Sequence[Message], raw: str, error: str) -> list[Message]:
    return [
        *messages,
        {"role": "assistant", "content": raw},
        {
            "role": "user",
            "content": f"That answer is not usable: {error}. Reply again with only the corrected JSON object.",
        },
    ]


class LlmClient:
    """Chat completions in JSON mode, bounded by a semaphore, retried and validated."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        timeout: float,
        concurrency: int,
        max_retries: int,
        first_backoff: float = 0.5,
        max_backoff: float = 10.0,
    ) -> None:
        self.model = model
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self._slots = asyncio.Semaphore(max(concurrency, 1))
        self._max_retries = max(max_retries, 0)
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff

    @classmethod
    def from_settings(cls, settings: Settings) -> LlmClient | None:
        """None when no LLM is configured: every caller then keeps its default path."""
        if not settings.llm_base_url:
            return None
        return cls(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            timeout=settings.llm_timeout,
            concurrency=settings.llm_concurrency,
            max_retries=settings.llm_max_retries,
            max_backoff=min(settings.retry_max_backoff, 10.0),
        )

    async def close(self) -> None:
        await self._client.close()

    async def complete_json(
        self,
        operation: str,
        system: str,
        user: str,
        answer: type[A],
        check: Check[A] | None = None,
        max_tokens: int | None = None,
    ) -> Outcome[A]:
        """Ask once, repair once, else fall back; the outcome is counted either way."""
        outcome = await self._complete_json(operation, system, user, answer, check, max_tokens)
        result = outcome.reason if isinstance(outcome, Fallback) else ("repaired" if outcome.repaired else "ok")
        metrics.OUTCOMES.labels(operation=operation, result=result).inc()
        if isinstance(outcome, Fallback):
            log.warning("llm %s fell back (%s): %s", operation, outcome.reason, outcome.error[:200])
        return outcome

    async def _complete_json(
        self,
        operation: str,
        system: str,
        user: str,
        answer: type[A],
        check: Check[A] | None,
        max_tokens: int | None,
    ) -> Outcome[A]:
        messages: list[Message] = [
            {"role": "system", "content": f"{system}\n\n{schema_instruction(answer)}"},
            {"role": "user", "content": user},
        ]
        first_raw: str | None = None
        for attempt in range(2):  # the answer, then one repair
            try:
                raw, truncated = await self._request(operation, messages, max_tokens)
            except _Transient as exc:
                return Fallback(exc.result, str(exc), first_raw)
            except _Permanent as exc:
                return Fallback("client_error", str(exc), first_raw)
            parsed = parse_answer(raw, answer, check, truncated)
            if not isinstance(parsed, str):
                return Ok(parsed, repaired=attempt > 0)
            if attempt == 0:
                first_raw = raw
                messages = repair_messages(messages, raw, parsed)
            else:
                return Fallback("invalid_output", parsed, raw)
        raise AssertionError("unreachable")

    async def _request(self, operation: str, messages: list[Message], max_tokens: int | None) -> tuple[str, bool]:
        """(content, truncated) of one completion, transient failures retried with capped backoff."""
        attempt = 0
        while True:
            try:
                response = await self._timed_create(operation, messages, max_tokens)
            except openai.OpenAIError as exc:
                kind = classify(exc)
                if kind is None:
                    raise
                if isinstance(kind, _Permanent) or attempt >= self._max_retries:
                    raise kind from exc
                metrics.RETRIES.labels(operation=operation, cause=kind.result).inc()
                delay = backoff(attempt, self._first_backoff, self._max_backoff, kind.retry_after)
                log.info("llm %s: %s, retry %d in %.2fs", operation, kind.result, attempt + 1, delay)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            usage = response.usage
            if usage is not None:
                metrics.TOKENS.labels(operation=operation, kind="prompt").inc(usage.prompt_tokens or 0)
                metrics.TOKENS.labels(operation=operation, kind="completion").inc(usage.completion_tokens or 0)
            if not response.choices:
                return "", False
            choice = response.choices[0]
            return choice.message.content or "", choice.finish_reason == "length"

    async def _timed_create(self, operation: str, messages: list[Message], max_tokens: int | None) -> ChatCompletion:
        """One HTTP request inside a concurrency slot; latency excludes the wait for the slot."""
        async with self._slots:
            started = time.perf_counter()
            try:
                return await self._client.chat.completions.create(
                    model=self.model,
                    messages=cast("list[ChatCompletionMessageParam]", messages),  # plain dicts are the wire format
                    response_format={"type": "json_object"},
                    temperature=0,
                    max_tokens=openai.omit if max_tokens is None else max_tokens,
                )
            finally:
                metrics.LATENCY.labels(operation=operation).observe(time.perf_counter() - started)
