-- Google ADK's per-session record (ledger/api/adk_rows.py): its ids, its own
-- state and its ADK times, in a small row of its own, so that an append, which
-- moves the update time, rewrites this row and not the session's (whose
-- `metadata` held it before). The app's and the user's state stay in
-- adk_shared_state.
CREATE TABLE adk_sessions (
    session_label TEXT PRIMARY KEY,  -- adk:<app>:<user>:<id>, a session of `sessions`
    app_name      TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    state         TEXT NOT NULL,     -- JSON object, the session's own keys
    create_time   REAL NOT NULL,     -- seconds since the epoch, as ADK counts time
    update_time   REAL NOT NULL
) WITHOUT ROWID;
INSERT INTO adk_sessions
    SELECT label, json_extract(metadata, '$.adk.app'), json_extract(metadata, '$.adk.user'),
           json_extract(metadata, '$.adk.id'), json_extract(metadata, '$.adk.state'),
           json_extract(metadata, '$.adk.create_time'), json_extract(metadata, '$.adk.update_time')
    FROM sessions
    WHERE label >= 'adk:' AND label < 'adk;' AND json_extract(metadata, '$.adk.id') IS NOT NULL;
UPDATE sessions SET metadata = NULL
    WHERE label IN (SELECT session_label FROM adk_sessions);
