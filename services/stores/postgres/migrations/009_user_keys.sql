-- Per-user data keys of the encrypted archive (services/archive).
-- memory.archive holds every accepted turn sealed with its user's data key;
-- the key is kept here only wrapped (AES-GCM) by the master key from settings,
-- and `master_key_id` names that master key (a digest, not the key), so a
-- process given another master key says so instead of failing to decrypt.
-- One key per user. The table has tenant_id and user_id columns on purpose:
-- forgetting a user deletes every row of every such table
-- (services/stores/postgres/forget.py), so it deletes the key, and with it
-- every archived turn of theirs becomes unreadable (crypto-shredding).
CREATE TABLE user_keys (
    tenant_id     text NOT NULL,
    user_id       text NOT NULL,
    key_id        text NOT NULL UNIQUE,
    wrapped_key   bytea NOT NULL,
    master_key_id text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);
