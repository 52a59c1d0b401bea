-- The console's page of sessions, the latest changed first (ledger/console.py), read
-- from this index rather than a sort of every session.
CREATE INDEX sessions_updated ON sessions(updated_at DESC, label);
