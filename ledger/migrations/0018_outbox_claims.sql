-- Which node pushes a pending reply when several nodes share this ledger
-- (ledger/outbox_claims.py): the node that claimed it and when. A claim older
-- than the lease may be taken over (the node died before the adapter confirmed).
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claimed_at INTEGER;
