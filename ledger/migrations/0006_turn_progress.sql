-- The partial output of a turn that is still running, saved now and then while
-- it streams (ledger/turns.py), so a turn cut off by a crash keeps what
-- it had said. A row lives from the turn's first save to its commit, or to the
-- recovery that records it as aborted.
CREATE TABLE turn_progress (
    turn_id       TEXT PRIMARY KEY,
    session_label TEXT NOT NULL,
    output        TEXT NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
