CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE turns (
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    event_id    text NOT NULL,
    session_id  text NOT NULL,
    turn_index  integer NOT NULL,
    role        text NOT NULL,
    content     text NOT NULL,
    ts          timestamptz NOT NULL,
    metadata    jsonb NOT NULL DEFAULT '{}',
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, event_id)
);
CREATE INDEX turns_session ON turns (tenant_id, user_id, session_id, turn_index);

CREATE TABLE sessions (
    tenant_id     text NOT NULL,
    user_id       text NOT NULL,
    session_id    text NOT NULL,
    window_turns  jsonb NOT NULL DEFAULT '[]',
    window_tokens integer NOT NULL DEFAULT 0,
    turn_count    integer NOT NULL DEFAULT 0,
    last_turn_at  timestamptz,
    closed_at     timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, session_id)
);

CREATE TABLE memories (
    id                  text PRIMARY KEY,
    tenant_id           text NOT NULL,
    user_id             text NOT NULL,
    type                text NOT NULL,
    text                text NOT NULL,
    content_hash        text NOT NULL,
    category            text,
    key_name            text,
    value               text,
    importance          real NOT NULL,
    confidence          real NOT NULL,
    status              text NOT NULL,
    observed_at         timestamptz NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    superseded_at       timestamptz,
    superseded_by       text,
    source_session_id   text NOT NULL,
    provenance          jsonb NOT NULL,
    entities            text[] NOT NULL DEFAULT '{}',
    access_count        integer NOT NULL DEFAULT 0,
    reinforcement_count integer NOT NULL DEFAULT 0,
    version             integer NOT NULL DEFAULT 1,
    embedding           vector
);
CREATE INDEX memories_scope ON memories (tenant_id, user_id, status, type);
CREATE INDEX memories_hash ON memories (tenant_id, user_id, type, content_hash) WHERE status = 'active';
CREATE UNIQUE INDEX memories_active_fact ON memories (tenant_id, user_id, category, key_name)
    WHERE status = 'active' AND type = 'fact';
CREATE INDEX memories_superseded_by ON memories (superseded_by);
