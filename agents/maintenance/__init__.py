"""Maintenance of long-term memory (decay, prune, patterns, semantic topics) and idle-session closing.

`rules` decides (pure functions, one module per rule), `run` applies a pass
through Postgres and `memory.changes`, `idle` closes quiet sessions through
the log, `timers` schedules both on the leader; `memstream maintain` runs one
pass from the command line.
"""

from agents.maintenance.timers import register

__all__ = ["register"]
