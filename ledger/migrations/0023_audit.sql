-- The audit trail (ledger/audit.py): who did what to which session, entity or
-- turn, and whether it was refused. One row for every operator op that changed
-- something or was refused, and every refused agent tool call, written in the
-- transaction of the change it records. Rows name what was acted on, never
-- message text, tool arguments or secrets.
-- Append-only: a row is never deleted, and the one change allowed is the
-- forgetting of a person (`entity.erase`), which sets `target` to '[erased]'
-- and nothing else (ledger/audit.py `forget`).
CREATE TABLE audit (
    id      TEXT PRIMARY KEY,            -- ULID: the order rows were written in
    at      INTEGER NOT NULL,            -- ms since the epoch
    uid     INTEGER,                     -- the operator's peer uid; NULL: an agent's tool call
    role    TEXT,                        -- read | operate | admin; NULL: an agent's tool call
    op      TEXT NOT NULL,               -- the op, or the tool's name
    target  TEXT,                        -- the session label, entity id or turn id acted on
    outcome TEXT NOT NULL CHECK (outcome = 'ok' OR outcome = 'refused')
);
CREATE INDEX audit_at ON audit(at);
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN
    SELECT RAISE(ABORT, 'the audit trail is append-only');
END;
CREATE TRIGGER audit_only_forgets BEFORE UPDATE ON audit
    WHEN NOT (NEW.target IS '[erased]' AND NEW.id IS OLD.id AND NEW.at IS OLD.at
              AND NEW.uid IS OLD.uid AND NEW.role IS OLD.role AND NEW.op IS OLD.op
              AND NEW.outcome IS OLD.outcome)
BEGIN
    SELECT RAISE(ABORT, 'the audit trail is append-only');
END;
