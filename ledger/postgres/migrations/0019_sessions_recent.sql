-- Sessions are listed latest first through an index on the block of time each last
-- changed in (ledger/recent.py), as the SQLite ledger's migration `sessions_recent`
-- does: a turn's commit leaves the index alone unless the block changes.
ALTER TABLE sessions ADD COLUMN updated_block BIGINT NOT NULL DEFAULT 0;
UPDATE sessions SET updated_block = updated_at >> 20;
CREATE INDEX sessions_recent ON sessions(updated_block DESC, label);
DROP INDEX IF EXISTS sessions_updated;
