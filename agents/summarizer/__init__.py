"""summarizer stage."""

from agents.summarizer import agent as agent

__all__ = ["agent"]
