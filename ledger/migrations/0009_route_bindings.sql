-- Route bindings (ledger/bindings.py): a conversation whose messages go to a
-- session of the person's choosing (a fork, say) instead of the one its route
-- leads to. Read by ingest before the session key is built. thread_id is ''
-- for a conversation without threads, so the key stays unique.
CREATE TABLE route_bindings (
    channel       TEXT NOT NULL,
    peer_kind     TEXT NOT NULL,
    peer_id       TEXT NOT NULL,
    thread_id     TEXT NOT NULL DEFAULT '',
    session_label TEXT NOT NULL REFERENCES sessions(label),
    bound_by      TEXT NOT NULL,                  -- fork | switch | operator
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (channel, peer_kind, peer_id, thread_id)
) WITHOUT ROWID;
