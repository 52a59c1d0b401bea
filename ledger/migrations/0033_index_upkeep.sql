-- Whether the full-text index may still hold words deleted before FTS5 secure-delete
-- was turned on for it (ledger/db.py `turn_on_secure_index`): rows deleted without a
-- merge after them (a library delete, an expiry cut off midway) left their words in
-- old segments. The next erasure or expiry then merges the whole index once, as
-- before the switch, and clears it (ledger/erasure.py `merge_index`).
CREATE TABLE index_upkeep (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    whole_merge_due INTEGER NOT NULL
);
