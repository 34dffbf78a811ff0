"""Running processes: the worker and read-service runner the CLI starts."""
