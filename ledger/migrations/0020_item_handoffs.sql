-- When an item was handed to its session's runtime (a Temporal workflow), as the node
-- that landed the signal recorded it (ledger/handoffs.py). A queued item with none,
-- some seconds old, was acked by a node that died before its hand-off landed: any
-- node hands it over. The local runtime never sets it.
ALTER TABLE queue_items ADD COLUMN handed_at INTEGER;
CREATE INDEX queue_items_unhanded ON queue_items(created_at)
    WHERE status = 'queued' AND handed_at IS NULL;
