-- turn_events' type check as plain comparisons instead of an IN list. SQLite
-- checks `type IN (...)` of more than two values through a temporary b-tree of
-- the list, built again for every row written: three times the cost of the
-- row's own insert (docs/performance.md, "The broker's events in the writer").
-- The same eight types. Rebuilt, not altered: SQLite cannot change a
-- constraint. Every row is copied.
CREATE TABLE turn_events_checked (
    turn_id       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    session_label TEXT NOT NULL,
    type          TEXT NOT NULL CHECK (type = 'intent' OR type = 'action' OR type = 'file'
                                       OR type = 'snapshot' OR type = 'decision'
                                       OR type = 'error' OR type = 'llm' OR type = 'feedback'),
    payload       TEXT NOT NULL,             -- JSON object
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID;
INSERT INTO turn_events_checked SELECT turn_id, seq, session_label, type, payload, created_at
    FROM turn_events;
DROP TABLE turn_events;
ALTER TABLE turn_events_checked RENAME TO turn_events;
CREATE INDEX turn_events_session ON turn_events(session_label, created_at);
CREATE INDEX turn_events_type ON turn_events(type, created_at);
