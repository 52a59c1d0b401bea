-- Google ADK's shared state (ledger/integrations/adk/): what the `app:` keys of
-- an app's sessions and the `user:` keys of one user's sessions hold. A session's
-- own keys live in its `metadata`; `temp:` keys are never stored.
CREATE TABLE adk_shared_state (
    app_name    TEXT NOT NULL,
    scope       TEXT NOT NULL CHECK (scope IN ('app', 'user')),
    user_id     TEXT NOT NULL,   -- '' for the app's state
    state       TEXT NOT NULL,   -- JSON object, keys without their prefix
    update_time REAL NOT NULL,   -- seconds since the epoch, as ADK counts time
    PRIMARY KEY (app_name, scope, user_id)
) WITHOUT ROWID;
