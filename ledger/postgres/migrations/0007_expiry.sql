-- Retention (ledger/retention.py), as the SQLite ledger's migration 0022 has it.
ALTER TABLE turns ADD COLUMN expired_at bigint;
