"""Applying consolidation decisions inside the batch's Postgres transaction.

`candidate.apply_candidate` decides one candidate and writes it: the small
actions (add, supersede, delete, reinforce) in place, the larger ones in
their own module (`merge`, `history`, `replay`). `records` builds the records
an action writes (pure), `changes` the `memory.changes` messages they yield,
and `context` holds the lookups a whole batch shares.
"""
