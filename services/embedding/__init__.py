"""Text embedding: local MiniLM through ONNX Runtime, with a content-hash cache."""

from services.embedding.embedder import CachedEmbedder, Embedder, MiniLmEmbedder

__all__ = ["CachedEmbedder", "Embedder", "MiniLmEmbedder"]
