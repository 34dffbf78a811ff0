"""consolidator stage."""

from agents.consolidator import agent as agent

__all__ = ["agent"]
