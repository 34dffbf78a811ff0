"""Maintenance rules as pure functions: what one pass does to one user's memories.

No I/O and no clock reads here (agents.maintenance.run writes a pass): the
same records, vectors and `now` always plan the same writes. `plan` runs the
rules in their order over one user; one module per rule: `decay` (decay and
prune), `patterns`, `topics` (semantic memories), `questions` (deferring open
questions). `synthesized` builds the records patterns and topics write,
`state` is a pass's working state, `config` the rules' settings and `common`
the helpers several rules share.
"""
