-- The full-text index holds a library item's text, not its JSON.
--
-- A library turn (engine 'library', ledger/api/) stores each item as its JSON,
-- and the index was fed that JSON whole: the keys and discriminators every
-- item repeats ("role", "user", "content", "type", "message") went into it for
-- every message, so a search for `message` or `content` matched every library
-- item, and they were 0.3 of the index's 1.9 MB in bench.peers' history.
--
-- messages_text is what the index holds for each message: a daemon message's
-- text as it is; a library item's string values in document order, without
-- the values of `role` and `type` keys (the item's kind, not its words). The
-- index reads it as its external content, so snippet() shows those words, and
-- 'delete' is given exactly the text that was indexed: the view is the one
-- place the text is computed (ledger/fts.py indexes from it too). A library
-- row that is not valid JSON (never written by the library) is indexed whole,
-- so a damaged row cannot make the indexing statement, and its commit, fail.
CREATE VIEW messages_text (id, content) AS
    SELECT m.id,
           CASE WHEN t.engine = 'library' AND json_valid(m.content)
                THEN (SELECT coalesce(group_concat(j.value, ' '), '') FROM json_tree(m.content) j
                      WHERE j.type = 'text' AND coalesce(j.key, '') NOT IN ('role', 'type'))
                ELSE m.content END
    FROM messages m JOIN turns t ON t.id = m.turn_id;

DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content = 'messages_text', content_rowid = 'id', tokenize = 'unicode61'
);
-- BEFORE, while the row (and so its text in the view) is still there.
CREATE TRIGGER messages_fts_delete BEFORE DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
        SELECT 'delete', id, content FROM messages_text WHERE id = old.id;
END;
CREATE TRIGGER messages_fts_update_old BEFORE UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content)
        SELECT 'delete', id, content FROM messages_text WHERE id = old.id;
END;
CREATE TRIGGER messages_fts_update_new AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (rowid, content)
        SELECT id, content FROM messages_text WHERE id = new.id;
END;
-- Not FTS5's 'rebuild' (nor its 'integrity-check' with rank 1): they read the
-- view from inside FTS5, which may not run a table-valued function (json_tree)
-- there ("SQL logic error"). The index is new and empty, so this is a rebuild.
INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages_text;
UPDATE fts_progress SET indexed_through = coalesce((SELECT max(id) FROM messages), 0);
