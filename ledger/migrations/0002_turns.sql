-- Turns, their messages and tool calls, and the outbox of replies.

-- The turn tree. parent_id is the head the turn started from; a session's
-- thread is the chain from its head back to the root.
CREATE TABLE turns (
    id                TEXT PRIMARY KEY,
    session_label     TEXT NOT NULL,
    parent_id         TEXT REFERENCES turns(id),
    type              TEXT NOT NULL,      -- turn | queue_batch | worker_result | compaction
    status            TEXT NOT NULL,      -- completed | aborted | failed
    reason            TEXT,               -- why aborted or failed: interrupt | stop | crash | shutdown | timeout | engine
    error             TEXT,
    output            TEXT,               -- the assistant's reply; partial when aborted
    engine            TEXT,
    model             TEXT,
    started_at        INTEGER NOT NULL,
    completed_at      INTEGER NOT NULL,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER
) WITHOUT ROWID;
CREATE INDEX turns_session ON turns(session_label, started_at);
CREATE INDEX turns_parent ON turns(parent_id);

CREATE TABLE messages (
    id         INTEGER PRIMARY KEY,
    turn_id    TEXT NOT NULL REFERENCES turns(id),
    seq        INTEGER NOT NULL,           -- order within the turn
    role       TEXT NOT NULL,              -- user | assistant | system | tool
    channel    TEXT,
    msg_id     TEXT,
    item_id    TEXT,
    sender_id  TEXT,
    content    TEXT NOT NULL,
    tokens     INTEGER,
    created_at INTEGER NOT NULL,
    UNIQUE (turn_id, seq)
);

CREATE TABLE tool_calls (
    id              TEXT PRIMARY KEY,
    turn_id         TEXT NOT NULL REFERENCES turns(id),
    seq             INTEGER NOT NULL,
    name            TEXT NOT NULL,
    arguments       TEXT,
    result          TEXT,
    status          TEXT NOT NULL,         -- ok | error
    spawned_session TEXT,
    created_at      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX tool_calls_turn ON tool_calls(turn_id, seq);

-- Replies until an adapter confirms them; at-least-once by out_id.
CREATE TABLE outbox (
    out_id        TEXT PRIMARY KEY,
    session_label TEXT NOT NULL,
    turn_id       TEXT REFERENCES turns(id),  -- NULL for replies to chat commands
    channel       TEXT NOT NULL,
    frame         TEXT NOT NULL,           -- the deliver frame as JSON
    status        TEXT NOT NULL DEFAULT 'pending',  -- pending | delivered
    attempts      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    delivered_at  INTEGER
) WITHOUT ROWID;
CREATE INDEX outbox_pending ON outbox(channel, created_at) WHERE status = 'pending';
