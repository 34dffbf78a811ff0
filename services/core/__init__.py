"""Settings, errors, topic names, metrics and text utilities: what every layer above may import."""
