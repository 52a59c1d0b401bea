-- Which attempt of a session's turn may run it, as SQLite's migration
-- 0025_session_leases keeps it (ledger/leases.py).
CREATE TABLE session_leases (
    session_label TEXT PRIMARY KEY,
    token BIGINT NOT NULL,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
