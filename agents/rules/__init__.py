"""rules: inline extraction of facts and preferences, plus the raw exchange (pure functions).

The window stage calls it for every turn the archive accepts, inside its
transaction, so a redelivered or conflicting turn never yields candidates.
"""
