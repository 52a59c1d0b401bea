-- File snapshots by content (ledger/snapshots.py).

-- Every distinct content once, by its sha256, zlib-compressed. A blob lives
-- while a snapshot names it; only an explicit gc removes one that none does.
CREATE TABLE blobs (
    sha256     TEXT PRIMARY KEY,      -- hex digest of the content
    bytes      INTEGER NOT NULL,      -- the content's size
    data       BLOB NOT NULL,         -- the content, zlib-compressed
    created_at INTEGER NOT NULL
);

-- What a turn's `file` events did to each file: one row per event, written in
-- the turn's transaction beside its turn_events row (same turn_id and seq).
-- sha256 is the file after the event (NULL: deleted, or no content reported);
-- before_sha256 the file after the latest earlier turn of the thread that
-- touched it (NULL: none did, or it was deleted).
CREATE TABLE file_snapshots (
    turn_id       TEXT NOT NULL REFERENCES turns(id),
    seq           INTEGER NOT NULL,
    session_label TEXT NOT NULL,
    path          TEXT NOT NULL,
    op            TEXT NOT NULL,      -- write | edit | create | delete
    before_sha256 TEXT,
    sha256        TEXT,
    bytes         INTEGER,            -- the content's size; NULL when unknown or deleted
    stored        INTEGER NOT NULL,   -- 1: the content is in blobs; 0: hash and size only
    note          TEXT,               -- why the content is not stored
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
-- The walk up a thread asks, turn by turn, whether it touched a path.
CREATE INDEX file_snapshots_turn_path ON file_snapshots(turn_id, path);
-- Whether a thread's sessions ever touched a path, before any walk.
CREATE INDEX file_snapshots_path ON file_snapshots(path, session_label);
CREATE INDEX file_snapshots_blob ON file_snapshots(sha256) WHERE sha256 IS NOT NULL;
