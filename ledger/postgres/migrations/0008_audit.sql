-- The audit trail, as SQLite's migration 0023_audit keeps it (ledger/audit.py):
-- append-only, the one change allowed being `target` set to '[erased]' by the
-- forgetting of a person.
CREATE TABLE audit (
    id      TEXT PRIMARY KEY,
    at      BIGINT NOT NULL,
    uid     BIGINT,
    role    TEXT,
    op      TEXT NOT NULL,
    target  TEXT,
    outcome TEXT NOT NULL CHECK (outcome = 'ok' OR outcome = 'refused')
);
CREATE INDEX audit_at ON audit(at);

CREATE FUNCTION audit_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.target IS NOT DISTINCT FROM '[erased]'
        AND NEW.id = OLD.id AND NEW.at = OLD.at AND NEW.uid IS NOT DISTINCT FROM OLD.uid
        AND NEW.role IS NOT DISTINCT FROM OLD.role AND NEW.op = OLD.op
        AND NEW.outcome = OLD.outcome THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the audit trail is append-only';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
