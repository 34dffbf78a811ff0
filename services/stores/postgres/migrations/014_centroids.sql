-- Per (tenant, user, type, dimensions): the sum and count of the active
-- embeddings, kept by a trigger as rows change. Importance's novelty needs
-- each batch user's centroid; summing every active row per batch grew with a
-- user's memory (1.0-1.5 s per 256-candidate batch at 100,000 memories) and
-- became the consolidator's whole cost. The trigger makes it one row read.
--
-- Sums are float4 (pgvector), added and subtracted as rows come and go, so a
-- centroid may drift from a fresh sum by rounding; novelty is a heuristic and
-- a rebuild replays the same writes in the same order, so it drifts the same.
CREATE TABLE memory_centroids (
    tenant_id text NOT NULL,
    user_id   text NOT NULL,
    type      text NOT NULL,
    dims      integer NOT NULL,
    total     vector NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (tenant_id, user_id, type, dims)
);

INSERT INTO memory_centroids (tenant_id, user_id, type, dims, total, n)
SELECT tenant_id, user_id, type, vector_dims(embedding), sum(embedding), count(*)
FROM memories
WHERE status = 'active' AND embedding IS NOT NULL
GROUP BY tenant_id, user_id, type, vector_dims(embedding);

-- The sums live next to the table that changed (TG_TABLE_SCHEMA): a
-- generation's schema keeps its own (services/generations.py attaches the
-- triggers to each new generation's `memories`).
CREATE FUNCTION memory_centroids_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'active' AND OLD.embedding IS NOT NULL THEN
        EXECUTE format(
            'UPDATE %I.memory_centroids SET total = total - $4, n = n - 1
             WHERE tenant_id = $1 AND user_id = $2 AND type = $3 AND dims = vector_dims($4)', TG_TABLE_SCHEMA)
        USING OLD.tenant_id, OLD.user_id, OLD.type, OLD.embedding;
        EXECUTE format(
            'DELETE FROM %I.memory_centroids
             WHERE tenant_id = $1 AND user_id = $2 AND type = $3 AND dims = vector_dims($4) AND n <= 0',
            TG_TABLE_SCHEMA)
        USING OLD.tenant_id, OLD.user_id, OLD.type, OLD.embedding;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'active' AND NEW.embedding IS NOT NULL THEN
        EXECUTE format(
            'INSERT INTO %I.memory_centroids AS c (tenant_id, user_id, type, dims, total, n)
             VALUES ($1, $2, $3, vector_dims($4), $4, 1)
             ON CONFLICT (tenant_id, user_id, type, dims)
             DO UPDATE SET total = c.total + EXCLUDED.total, n = c.n + 1',
            TG_TABLE_SCHEMA)
        USING NEW.tenant_id, NEW.user_id, NEW.type, NEW.embedding;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION memory_centroids_attach(target text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TRIGGER memory_centroids_insert AFTER INSERT ON %I.memories
                    FOR EACH ROW EXECUTE FUNCTION memory_centroids_track()', target);
    EXECUTE format('CREATE TRIGGER memory_centroids_delete AFTER DELETE ON %I.memories
                    FOR EACH ROW EXECUTE FUNCTION memory_centroids_track()', target);
    -- Most updates (reinforcement, access marks, provenance) touch none of these: no work for them.
    EXECUTE format('CREATE TRIGGER memory_centroids_update AFTER UPDATE ON %I.memories FOR EACH ROW
                    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.embedding IS DISTINCT FROM NEW.embedding
                          OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id OR OLD.user_id IS DISTINCT FROM NEW.user_id
                          OR OLD.type IS DISTINCT FROM NEW.type)
                    EXECUTE FUNCTION memory_centroids_track()', target);
END
$$;

SELECT memory_centroids_attach(current_schema());
