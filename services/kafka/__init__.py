"""Kafka clients every layer above shares: the turn producer and the readers of a topic's end."""
