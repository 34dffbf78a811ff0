-- Memory that is tended: access marks, compression into patterns, open questions.
ALTER TABLE memories ADD COLUMN last_accessed_at timestamptz;
ALTER TABLE memories ADD COLUMN compressed boolean NOT NULL DEFAULT false;
ALTER TABLE memories ADD COLUMN question jsonb;

-- Commands already applied (access marks are not idempotent by themselves).
CREATE TABLE applied_commands (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    command_id text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, command_id)
);
