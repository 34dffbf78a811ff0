"""The Python client of memstream's read service (sync and async)."""
