-- The rolling per-session summary of the LLM fact extraction (LLM
-- path a): each evicted chunk is sent with the summary so far and the answer's
-- updated summary replaces it. The row remembers the chunk folded last and
-- the summary as it was before that chunk, so a redelivered chunk never folds
-- itself in twice (the rule is in services/stores/postgres/summaries.py).
CREATE TABLE session_summaries (
    tenant_id          text NOT NULL,
    user_id            text NOT NULL,
    session_id         text NOT NULL,
    summary            text NOT NULL,
    previous_summary   text NOT NULL DEFAULT '',
    chunk_id           text NOT NULL,
    through_turn_index integer NOT NULL,
    through_event_id   text NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, session_id)
);
