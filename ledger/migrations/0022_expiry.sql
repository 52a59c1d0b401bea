-- Retention (ledger/retention.py): when a turn was expired, leaving a stub (its id,
-- parent, type, status and times) so trees, forks and threads stay whole. NULL for
-- every turn that keeps its contents.
ALTER TABLE turns ADD COLUMN expired_at INTEGER;
