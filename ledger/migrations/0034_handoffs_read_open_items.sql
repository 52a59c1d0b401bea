-- The hand-off reads (ledger/handoffs.py) go through `queue_items_open`, which holds
-- only the items in flight, so `queue_items_unhanded` goes: no SQLite plan used it
-- (without statistics the planner scanned queue_items in seq order), and every
-- queued item still wrote it twice, once queued and once running. PostgreSQL, where a
-- cluster's nodes read it, keeps its own.
DROP INDEX IF EXISTS queue_items_unhanded;
