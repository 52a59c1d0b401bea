-- Message text is indexed once per write transaction, not by a trigger per
-- insert (see ledger/fts.py). Updates and deletes keep their triggers.
DROP TRIGGER messages_fts_insert;
CREATE TABLE fts_progress (
    only_row        INTEGER PRIMARY KEY CHECK (only_row = 1),
    indexed_through INTEGER NOT NULL  -- the highest messages.id in messages_fts
);
INSERT INTO fts_progress (only_row, indexed_through)
    SELECT 1, coalesce(max(id), 0) FROM messages;
