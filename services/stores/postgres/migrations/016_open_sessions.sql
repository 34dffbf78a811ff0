-- Open sessions by their last turn: what the idle-session check asks every few seconds
-- (services/stores/postgres/maintenance.py idle_sessions). Closed sessions stay in the table
-- for good, so without it each check read every session ever held.
CREATE INDEX IF NOT EXISTS sessions_open_by_last_turn ON sessions (last_turn_at) WHERE closed_at IS NULL;
