-- The library face (ledger/api/): a session's title and its caller's metadata.
-- A library turn is an ordinary turn (engine 'library') whose messages hold one
-- JSON item each, so the daemon, export and fork see it like any other turn.
ALTER TABLE sessions ADD COLUMN title TEXT;
ALTER TABLE sessions ADD COLUMN metadata TEXT;  -- JSON object, NULL when unset
