-- The queue mode a message's route gives it when the message names none,
-- decided once at ingest (broker/router.py) and kept with its queue item, so
-- the session's actor does not route again and an item recovered after a
-- crash keeps the mode it was filed with. NULL for items that are not inbound
-- messages, and for those filed before this column.
ALTER TABLE queue_items ADD COLUMN route_mode TEXT;
