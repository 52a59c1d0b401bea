-- Recall by meaning, as the SQLite ledger's migration `embeddings` keeps it: one
-- float32 sentence vector a user or assistant message, the indexer's mark, and the
-- vector gone with its message's delete or erased content, in the same statement.
CREATE TABLE embeddings (
    message_id    BIGINT PRIMARY KEY,
    session_label TEXT NOT NULL,
    vector        BYTEA NOT NULL
);
CREATE INDEX embeddings_session ON embeddings(session_label);
CREATE TABLE embeddings_done (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    through BIGINT NOT NULL
);
CREATE FUNCTION embeddings_message_gone() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM embeddings WHERE message_id = OLD.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER embeddings_message_gone AFTER DELETE ON messages
    FOR EACH ROW EXECUTE FUNCTION embeddings_message_gone();
CREATE TRIGGER embeddings_message_erased AFTER UPDATE OF content ON messages
    FOR EACH ROW EXECUTE FUNCTION embeddings_message_gone();
