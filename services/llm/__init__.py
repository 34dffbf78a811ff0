"""The optional LLM path: any OpenAI-compatible endpoint, never required (unset base URL = no LLM).

Every operation returns `Ok(value)` or `Fallback(reason, error, raw_output)`;
on a fallback the caller keeps its rule/extractive path, and when
`fallback.dead_letter` it sends the raw output to memory.dlq as
`llm_invalid_output`.
"""

from services.llm.client import Fallback, LlmClient, Ok, Outcome
from services.llm.operations import (
    EXTRACTOR,
    Action,
    Decision,
    EpisodeAnswer,
    FactsAnswer,
    decide,
    extract_facts,
    fact_candidates,
    summarize_episode,
    synthesize,
)

__all__ = [
    "EXTRACTOR",
    "Action",
    "Decision",
    "EpisodeAnswer",
    "FactsAnswer",
    "Fallback",
    "LlmClient",
    "Ok",
    "Outcome",
    "decide",
    "extract_facts",
    "fact_candidates",
    "summarize_episode",
    "synthesize",
]
