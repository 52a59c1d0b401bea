-- An erasure records whether its deletes left words in the full-text index: none
-- when FTS5 secure-delete was on as it began (ledger/db.py `turn_on_secure_index`,
-- which stays on once set), so its last step has no index to merge. Rows from
-- before this column, and PostgreSQL's, say 1: merge (ledger/erasure.py).
ALTER TABLE erasures ADD COLUMN index_merge INTEGER NOT NULL DEFAULT 1;

-- The read views (ledger/forgotten.py) ask at every statement whether an erasure
-- is running: this index answers from the running ones alone, not every erasure
-- ever done.
CREATE INDEX erasures_running ON erasures (finished_at) WHERE finished_at IS NULL;
