-- Context units for exchanges. An exchange memory (one user turn)
-- keeps the texts of the turns just before it in its session (`context`,
-- oldest first; empty for every other memory and for a turn that opened its
-- session) and the embedding of the turn before it together with the turn
-- (`context_embedding`, the dense context vector of the recall index). Both
-- are fixed when the memory is written: a later turn never changes them, so a
-- replay derives the same values. `memstream rebuild index` reads them back
-- into the index; rows written before this migration have no context.
ALTER TABLE memories
    ADD COLUMN context text[] NOT NULL DEFAULT '{}',
    ADD COLUMN context_embedding vector;
