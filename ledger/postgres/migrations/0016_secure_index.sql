-- As the SQLite ledger's migration `secure_index` has it: an erasure's `index_merge` (always 1
-- here: PostgreSQL's own index drops dead entries with VACUUM), and the index of
-- running erasures the read views ask about at every statement.
ALTER TABLE erasures ADD COLUMN index_merge integer NOT NULL DEFAULT 1;
CREATE INDEX erasures_running ON erasures (finished_at) WHERE finished_at IS NULL;
