-- Timers (ledger/timers.py): one-shot and recurring, owned by a session.
-- A timer is live until a one-shot one fired or an operator cancelled it; the
-- row stays, so its firings can always be traced back to it.
CREATE TABLE timers (
    id            TEXT PRIMARY KEY,
    session_label TEXT NOT NULL REFERENCES sessions(label),
    text          TEXT NOT NULL,
    first_at      INTEGER NOT NULL,               -- the grid a recurring timer keeps to
    every_ms      INTEGER,                        -- NULL: fires once
    next_at       INTEGER,                        -- NULL once it will never fire again
    fired         INTEGER NOT NULL DEFAULT 0,     -- firings so far; the next is fired + 1
    status        TEXT NOT NULL DEFAULT 'live',   -- live | done | cancelled
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX timers_due ON timers(next_at) WHERE status = 'live';
CREATE INDEX timers_session ON timers(session_label) WHERE status = 'live';

-- One row per firing, in the transaction of its queue item: msg_id
-- 'timer:<timer>:<n>' is unique, so a firing can never be filed twice.
CREATE TABLE timer_firings (
    msg_id   TEXT PRIMARY KEY,
    timer_id TEXT NOT NULL REFERENCES timers(id),
    n        INTEGER NOT NULL,
    item_id  TEXT NOT NULL,
    due_at   INTEGER NOT NULL,
    fired_at INTEGER NOT NULL
) WITHOUT ROWID;
