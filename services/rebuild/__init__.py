"""Rebuilding derived state from its source: the index from Postgres, Postgres from `memory.changes`.

Each rebuild is an operator command (services/cli/rebuild.py) with a
progress display; the logic is here, apart from the command line.
- `progress`: the progress bar (a terminal) or progress log lines (anything else);
- `log_end`: reading a topic from its beginning to its end, with a broker whose reported end is wrong;
- `store`: Postgres memory from `memory.changes`;
- `index`: the recall index from Postgres;
- `embedded`: what a rebuild needs of the embedded stack (is it running, a Postgres to read).
"""
