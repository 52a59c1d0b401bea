-- Titles and outcomes of turns, and turn events written while a turn runs.

-- A short line saying what the turn was about (core/titles.py), where it
-- came from (mechanical | engine | model), and how it ended in plain words.
ALTER TABLE turns ADD COLUMN title TEXT;
ALTER TABLE turns ADD COLUMN title_source TEXT;
ALTER TABLE turns ADD COLUMN outcome TEXT;

-- A running turn's events are written before its turn row exists (the row is
-- written at the commit, or at crash recovery, with the same id), so the event
-- tables lose their foreign key on turns(id); their rows keep the turn id.
-- Rebuilt, not altered: SQLite cannot drop a constraint. Every row is copied.
CREATE TABLE turn_events_live (
    turn_id       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    session_label TEXT NOT NULL,
    type          TEXT NOT NULL CHECK (type IN ('intent', 'action', 'file', 'snapshot',
                                                'decision', 'error', 'llm', 'feedback')),
    payload       TEXT NOT NULL,             -- JSON object
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
INSERT INTO turn_events_live SELECT turn_id, seq, session_label, type, payload, created_at
    FROM turn_events;
DROP TABLE turn_events;
ALTER TABLE turn_events_live RENAME TO turn_events;
CREATE INDEX turn_events_session ON turn_events(session_label, created_at);
CREATE INDEX turn_events_type ON turn_events(type, created_at);

CREATE TABLE file_snapshots_live (
    turn_id       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    session_label TEXT NOT NULL,
    path          TEXT NOT NULL,
    op            TEXT NOT NULL,      -- write | edit | create | delete
    before_sha256 TEXT,
    sha256        TEXT,
    bytes         INTEGER,
    stored        INTEGER NOT NULL,
    note          TEXT,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
INSERT INTO file_snapshots_live SELECT turn_id, seq, session_label, path, op, before_sha256,
    sha256, bytes, stored, note FROM file_snapshots;
DROP TABLE file_snapshots;
ALTER TABLE file_snapshots_live RENAME TO file_snapshots;
CREATE INDEX file_snapshots_turn_path ON file_snapshots(turn_id, path);
CREATE INDEX file_snapshots_path ON file_snapshots(path, session_label);
CREATE INDEX file_snapshots_blob ON file_snapshots(sha256) WHERE sha256 IS NOT NULL;
