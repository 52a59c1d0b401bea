-- Retention (ledger/retention.py), as the SQLite ledger's migration 0021 has it.
ALTER TABLE turns ADD COLUMN expired_at bigint;
