-- Messages that must follow a commit (evicted chunks, candidates): written in
-- the same transaction as the state they come from, deleted once the broker
-- has them. A crash in between leaves them here to be sent again.
CREATE TABLE outbox (
    seq        bigserial,
    id         text PRIMARY KEY,
    scope      text NOT NULL,
    topic      text NOT NULL,
    key        bytea NOT NULL,
    value      bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_scope ON outbox (scope, seq);
CREATE INDEX outbox_age ON outbox (created_at);

-- The archive remembers what each event said, so a redelivery is told apart
-- from a different message reusing the same event id.
ALTER TABLE turns ADD COLUMN content_hash text;

-- The session_end event that closed a session: its redelivery changes nothing.
ALTER TABLE sessions ADD COLUMN end_event_id text;
