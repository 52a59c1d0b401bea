-- Which node pushes a pending reply when several nodes share this ledger, as
-- SQLite's migration 0018_outbox_claims keeps it (ledger/outbox_claims.py).
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claimed_at BIGINT;
