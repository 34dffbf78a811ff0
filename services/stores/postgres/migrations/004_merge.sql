-- Semantic dedup: the consolidator looks up, once per batch, the
-- nearest active memory of each candidate's type. `embedding` has no declared
-- dimension (other models may come), and HNSW needs one, so the index is on
-- the 384-dimension cast (all-MiniLM-L6-v2), partial on the rows a merge can
-- touch; rows of any other dimension stay out of it and are never cast.
-- Queries must repeat the same expression and predicate to use it.
CREATE INDEX memories_merge_hnsw ON memories
    USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WHERE status = 'active' AND type IN ('fact', 'preference', 'semantic', 'pattern')
      AND vector_dims(embedding) = 384;
