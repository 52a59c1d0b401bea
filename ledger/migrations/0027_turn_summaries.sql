-- Turn summaries, turn metadata, the session's prompt and model, and a strict
-- per-session sequence on events (docs/turns.md, "Summaries and sequences").
-- A turn's summary (JSON: actions taken, decisions, files read and modified,
-- outcome), made mechanically from its events at its end (core/turn_summary.py);
-- free-form metadata (a JSON object) given by the library's append or an engine.
ALTER TABLE turns ADD COLUMN summary TEXT;
ALTER TABLE turns ADD COLUMN metadata TEXT;
-- The system prompt and model of the session's latest turn; event_seq is the
-- session's last event sequence number, taken by every event written.
ALTER TABLE sessions ADD COLUMN system_prompt TEXT;
ALTER TABLE sessions ADD COLUMN model TEXT;
ALTER TABLE sessions ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;
-- turn_events gains session_seq (1, 2, 3... per session, in the order written)
-- and three types (validation_gate, memory_recall, system_event). Rebuilt, not
-- altered: SQLite cannot change a constraint. Existing rows are numbered in the
-- order they were written (created_at, then their turn's own order).
CREATE TABLE turn_events_seq (
    turn_id       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    session_label TEXT NOT NULL,
    type          TEXT NOT NULL CHECK (type = 'intent' OR type = 'action' OR type = 'file'
                                       OR type = 'snapshot' OR type = 'decision'
                                       OR type = 'error' OR type = 'llm' OR type = 'feedback'
                                       OR type = 'validation_gate' OR type = 'memory_recall'
                                       OR type = 'system_event'),
    payload       TEXT NOT NULL,             -- JSON object
    created_at    INTEGER NOT NULL,
    session_seq   INTEGER,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
INSERT INTO turn_events_seq
    SELECT turn_id, seq, session_label, type, payload, created_at,
           row_number() OVER (PARTITION BY session_label ORDER BY created_at, turn_id, seq)
    FROM turn_events;
DROP TABLE turn_events;
ALTER TABLE turn_events_seq RENAME TO turn_events;
CREATE INDEX turn_events_session ON turn_events(session_label, created_at);
CREATE INDEX turn_events_type ON turn_events(type, created_at);
UPDATE sessions SET event_seq = coalesce(
    (SELECT max(session_seq) FROM turn_events e WHERE e.session_label = sessions.label), 0);
