"""Read service, store adapters, embedder and CLI."""
