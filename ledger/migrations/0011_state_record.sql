-- The session-state record (seed 003) of every turn on a thread, and the bridge
-- notes an entity merge leaves for the surviving session (ledger/state_records.py,
-- ledger/bridges.py).

-- The record after each turn, written in the turn's own transaction from its
-- parent's record and what the turn did: a thread's record is its head's row, and
-- a fork inherits exactly its ancestors' part. Turns committed before this
-- migration have no row; their record is worked out from their stored rows.
CREATE TABLE turn_state (
    turn_id TEXT PRIMARY KEY REFERENCES turns(id),
    state   TEXT NOT NULL              -- JSON, core/session_state.py to_json
) WITHOUT ROWID;

-- What a merged-in session was about, for the first turn of the surviving one.
-- A note is shown until a turn that showed it completes (consumed_turn_id).
CREATE TABLE bridge_notes (
    id               TEXT PRIMARY KEY,
    session_label    TEXT NOT NULL,    -- the surviving (primary) session
    merged_session   TEXT NOT NULL,    -- the session merged into it
    note             TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    consumed_turn_id TEXT
) WITHOUT ROWID;
CREATE UNIQUE INDEX bridge_notes_pair ON bridge_notes(session_label, merged_session)
    WHERE consumed_turn_id IS NULL;
CREATE INDEX bridge_notes_pending ON bridge_notes(session_label) WHERE consumed_turn_id IS NULL;

-- The record a new thread starts from, when an automatic rollover carries the old
-- thread's record over (an explicit reset leaves none): taken, and removed, by
-- the new thread's first turn (ledger/state_records.py).
CREATE TABLE thread_seeds (
    session_label TEXT PRIMARY KEY,
    state         TEXT NOT NULL,
    created_at    INTEGER NOT NULL
) WITHOUT ROWID;
