-- Which attempt of a session's turn may run it, for a cluster on Temporal
-- (ledger/leases.py): one row per session that ever ran a turn there. `token`
-- grows by one at every taking, so an attempt that lost the lease can never renew
-- it; `expires_at` (ms) is when another attempt may take it. The local runtime
-- never writes it.
CREATE TABLE session_leases (
    session_label TEXT PRIMARY KEY,
    token INTEGER NOT NULL,
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
