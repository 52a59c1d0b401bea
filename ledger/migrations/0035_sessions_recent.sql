-- Sessions are listed latest first (the console's page, `sessions`: ledger/console.py,
-- ledger/queries.py) through an index on the block of time each last changed in
-- (ledger/recent.py), which a turn's commit rewrites only when the block changes,
-- instead of an index on `updated_at`, which every commit rewrote: one more page
-- written a commit.
ALTER TABLE sessions ADD COLUMN updated_block INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET updated_block = updated_at >> 20;
CREATE INDEX sessions_recent ON sessions(updated_block DESC);
DROP INDEX IF EXISTS sessions_updated;
