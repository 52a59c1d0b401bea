-- Google ADK's per-session record in a row of its own, as SQLite's migration
-- 0017_adk_sessions keeps it (ledger/api/adk_rows.py): an append rewrites this
-- small row, not the session's. No data moves: no PostgreSQL ledger held ADK
-- sessions in `sessions.metadata` before this table.
CREATE TABLE adk_sessions (
    session_label TEXT PRIMARY KEY,  -- adk:<app>:<user>:<id>, a session of `sessions`
    app_name      TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    state         TEXT NOT NULL,     -- JSON object, the session's own keys
    create_time   DOUBLE PRECISION NOT NULL,  -- seconds since the epoch, as ADK counts time
    update_time   DOUBLE PRECISION NOT NULL
);
