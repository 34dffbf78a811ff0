"""qdrant_sink stage."""

from agents.qdrant_sink import agent as agent

__all__ = ["agent"]
