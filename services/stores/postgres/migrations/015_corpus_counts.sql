-- Per tenant: in how many assistant turns each hashed term or sentence
-- occurs (agents/summarizer/salience.py), and, in bucket -1, how many
-- assistant turns were counted. Summaries weigh a chunk's words against them
-- so that what every reply says ("happy to help") does not name an episode.
-- Buckets, never words: the counts are aggregates over a tenant's users.
CREATE TABLE corpus_counts (
    tenant_id text NOT NULL,
    bucket    integer NOT NULL,
    docs      bigint NOT NULL,
    PRIMARY KEY (tenant_id, bucket)
);
