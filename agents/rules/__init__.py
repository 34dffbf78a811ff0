"""rules stage."""

from agents.rules import agent as agent

__all__ = ["agent"]
