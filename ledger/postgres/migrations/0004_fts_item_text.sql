-- SQLite's migration 0020_fts_item_text feeds its FTS5 index a library item's
-- string values instead of its JSON (a view joining each message to its turn's
-- engine). Here the full-text index is an expression index on the message row
-- alone, which does not know the turn's engine, so it keeps indexing the whole
-- content: a library item's keys stay searchable on PostgreSQL. Nothing of the
-- schema changes; the difference is written where the index's words are made.
COMMENT ON FUNCTION ledger_tsv(text) IS
    'the words of a message''s whole content, a library item''s JSON keys included'
    ' (SQLite''s FTS5 index holds only a library item''s string values: its'
    ' migration 0020_fts_item_text)';
