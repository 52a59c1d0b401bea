-- The console's page of sessions, the latest changed first (ledger/console.py), read
-- from this index rather than a sort of every session; the SQLite ledger has the same.
CREATE INDEX IF NOT EXISTS sessions_updated ON sessions(updated_at DESC, label);
