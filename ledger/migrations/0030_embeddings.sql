-- Recall by meaning (ledger/recall/vectors.py): one sentence vector a user or
-- assistant message, float32 little-endian, written off the turn's path by the
-- daemon's indexer, which records in `embeddings_done` the last message id it has
-- looked at (it resumes there after a restart). A vector holds its message's
-- content, so it goes with it: when the message is deleted (erasure, expiry, the
-- library's delete) or its content erased, in the same statement.
CREATE TABLE embeddings (
    message_id    INTEGER PRIMARY KEY,
    session_label TEXT NOT NULL,
    vector        BLOB NOT NULL
);
CREATE INDEX embeddings_session ON embeddings(session_label);
CREATE TABLE embeddings_done (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    through INTEGER NOT NULL
);
CREATE TRIGGER embeddings_message_gone AFTER DELETE ON messages BEGIN
    DELETE FROM embeddings WHERE message_id = OLD.id;
END;
CREATE TRIGGER embeddings_message_erased AFTER UPDATE OF content ON messages BEGIN
    DELETE FROM embeddings WHERE message_id = OLD.id;
END;
