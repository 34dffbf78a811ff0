-- Memory commands.
-- What a command changed, so a client that asked to wait (`?wait=true`) can
-- tell when Postgres and the index both show it: [{id, op, version, indexed}].
ALTER TABLE applied_commands ADD COLUMN outcome jsonb;
-- The id an imported memory had in its export document (NULL: the memory's
-- own id). Ids are global, so a memory imported under another tenant or user
-- gets a new one; exporting it again shows this one, and the round trip is exact.
ALTER TABLE memories ADD COLUMN export_id text;
