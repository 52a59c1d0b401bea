-- Context and memory: compactions, a full-text index, typed turn events,
-- running session totals, the scratchpad, and worker dispatches.

CREATE TABLE compactions (
    turn_id                     TEXT PRIMARY KEY REFERENCES turns(id),
    session_label               TEXT NOT NULL,
    summary                     TEXT NOT NULL,
    summarized_through_turn_id  TEXT,          -- the last turn the summary covers
    first_kept_turn_id          TEXT,          -- the first turn kept verbatim after it
    turns_summarized            INTEGER NOT NULL,
    trigger                     TEXT NOT NULL, -- proactive | manual | reactive
    instructions                TEXT,
    model                       TEXT,
    fallback                    INTEGER NOT NULL DEFAULT 0,  -- 1: the deterministic summary
    tokens_before               INTEGER,
    tokens_after                INTEGER,
    summary_tokens              INTEGER,
    summarization_input_tokens  INTEGER,
    summarization_output_tokens INTEGER,
    duration_ms                 INTEGER,
    created_at                  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX compactions_session ON compactions(session_label, created_at);

-- Full-text index over message text, kept by triggers.
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content = 'messages', content_rowid = 'id', tokenize = 'unicode61'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
CREATE INDEX messages_turn ON messages(turn_id, seq);

-- Typed events of a turn, one sequence per turn.
CREATE TABLE turn_events (
    turn_id       TEXT NOT NULL REFERENCES turns(id),
    seq           INTEGER NOT NULL,
    session_label TEXT NOT NULL,
    type          TEXT NOT NULL CHECK (type IN ('intent', 'action', 'file', 'snapshot',
                                                'decision', 'error', 'llm', 'feedback')),
    payload       TEXT NOT NULL,             -- JSON object
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
CREATE INDEX turn_events_session ON turn_events(session_label, created_at);
CREATE INDEX turn_events_type ON turn_events(type, created_at);

-- Running totals, updated in each turn's own transaction.
ALTER TABLE sessions ADD COLUMN total_events INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_tool_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_model_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_completion_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_files_modified INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_errors INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_errors_resolved INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET
    total_prompt_tokens = coalesce((SELECT sum(prompt_tokens) FROM turns
                                    WHERE turns.session_label = sessions.label), 0),
    total_completion_tokens = coalesce((SELECT sum(completion_tokens) FROM turns
                                        WHERE turns.session_label = sessions.label), 0),
    total_model_calls = (SELECT count(*) FROM turns WHERE turns.session_label = sessions.label
                         AND turns.status != 'aborted');

-- A session's scratchpad: a JSON object merged key by key.
CREATE TABLE scratchpad (
    session_label TEXT PRIMARY KEY REFERENCES sessions(label),
    state         TEXT NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- Worker dispatches (agent_send): one result per dispatch, exactly once.
CREATE TABLE dispatches (
    id              TEXT PRIMARY KEY,
    parent_session  TEXT NOT NULL,
    parent_turn_id  TEXT,
    tool_call_id    TEXT,
    target_session  TEXT NOT NULL,
    task            TEXT NOT NULL,
    status          TEXT NOT NULL,          -- running | completed | failed | timed_out
    result_item_id  TEXT,                   -- the worker_result item in the parent's queue
    depth           INTEGER NOT NULL,
    deadline_at     INTEGER,
    created_at      INTEGER NOT NULL,
    completed_at    INTEGER
) WITHOUT ROWID;
CREATE INDEX dispatches_parent ON dispatches(parent_session, created_at);
CREATE INDEX dispatches_running ON dispatches(deadline_at) WHERE status = 'running';
-- A task item names the dispatch it carries out.
ALTER TABLE queue_items ADD COLUMN dispatch_id TEXT;
CREATE INDEX dispatches_target ON dispatches(target_session, status);
