"""window stage."""

from agents.window import agent as agent

__all__ = ["agent"]
