"""The `memstream` command line: one module per command, named after it; `app.py` assembles the parser and dispatches.

`main` is here because the `memstream` script (pyproject) points at `services.cli:main`.
"""

from services.cli.app import main

__all__ = ["main"]
