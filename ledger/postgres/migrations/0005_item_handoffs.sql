-- When an item was handed to its session's runtime, as SQLite's migration
-- 0020_item_handoffs keeps it (ledger/handoffs.py).
ALTER TABLE queue_items ADD COLUMN handed_at BIGINT;
CREATE INDEX queue_items_unhanded ON queue_items(created_at)
    WHERE status = 'queued' AND handed_at IS NULL;
