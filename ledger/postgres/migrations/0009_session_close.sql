-- Sessions that end (ledger/closing.py), as the SQLite ledger's migration 0024 has it.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS ended_at bigint;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS closing_summary text;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS extends text;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS slug text;
