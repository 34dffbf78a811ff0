"""embedder stage."""

from agents.embedder import agent as agent

__all__ = ["agent"]
