-- API keys (services/auth). Only a keyed hash of each key is kept
-- (HMAC-SHA256 with the server's secret): the key itself is shown once, when
-- it is created, and never stored. `hint` is the key's first characters, so a
-- person can tell keys apart in `memstream keys list`. A key without a tenant
-- is an operator key, valid for every tenant, and only `admin` may be one.
-- Keys name no user: forgetting a user leaves this table alone.
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    key_hash     bytea NOT NULL UNIQUE,
    hint         text NOT NULL,
    tenant_id    text,
    role         text NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    name         text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CHECK (tenant_id IS NOT NULL OR role = 'admin')
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at);
