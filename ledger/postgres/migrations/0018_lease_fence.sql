-- A running turn's writes check its lease's token in their own transactions, holding
-- the lease's row in key-share mode (ledger/leases.py, `fenced`). With `token` in a
-- unique index it counts as part of the row's key: a taking, which moves the token
-- on, waits for those writes to commit, while a renewal, which changes `expires_at`
-- alone, does not. SQLite's one writer orders them without it.
CREATE UNIQUE INDEX session_leases_taking ON session_leases (session_label, token);
