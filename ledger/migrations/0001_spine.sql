-- The spine: identity, sessions, durable ingest and the queue backlog.
-- Times are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE entities (
    id          TEXT PRIMARY KEY,                 -- ent_<ulid>; ULID order is creation order
    kind        TEXT NOT NULL,                    -- 'contact' (auto-created) | 'person' | ...
    name        TEXT,
    merged_into TEXT REFERENCES entities(id),     -- union-find parent; NULL for a root
    created_at  INTEGER NOT NULL
);
CREATE INDEX entities_merged_into ON entities(merged_into) WHERE merged_into IS NOT NULL;

CREATE TABLE contacts (
    channel      TEXT NOT NULL,
    sender_id    TEXT NOT NULL,
    entity_id    TEXT NOT NULL REFERENCES entities(id),
    display_name TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (channel, sender_id)
) WITHOUT ROWID;
CREATE INDEX contacts_entity ON contacts(entity_id);

CREATE TABLE sessions (
    label              TEXT PRIMARY KEY,
    kind               TEXT NOT NULL,             -- dm | group | worker | fork | system
    entity_id          TEXT,                      -- for dm sessions: the entity the key was built from
    head_turn_id       TEXT,                      -- NULL until the first turn commits
    persona            TEXT,
    origin             TEXT NOT NULL,             -- inbound | fork | subagent | import | operator
    status             TEXT NOT NULL DEFAULT 'active',  -- active | merged | closed
    merged_into        TEXT REFERENCES sessions(label), -- primary session after an entity merge
    parent_session     TEXT,
    parent_turn_id     TEXT,
    spawn_tool_call_id TEXT,
    task               TEXT,
    task_status        TEXT,
    queue_override     TEXT,                      -- JSON set by '/queue', NULL when unset
    turns              INTEGER NOT NULL DEFAULT 0,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_entity ON sessions(entity_id) WHERE entity_id IS NOT NULL;
CREATE INDEX sessions_parent ON sessions(parent_session) WHERE parent_session IS NOT NULL;

CREATE TABLE session_aliases (
    alias         TEXT PRIMARY KEY,
    session_label TEXT NOT NULL REFERENCES sessions(label),
    reason        TEXT NOT NULL,                  -- identity_merge | manual
    created_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX session_aliases_target ON session_aliases(session_label);

-- Every move of a session's head, and every other change of what a label points at.
CREATE TABLE session_history (
    id            INTEGER PRIMARY KEY,
    session_label TEXT NOT NULL,
    turn_id       TEXT,
    prev_turn_id  TEXT,
    reason        TEXT NOT NULL,                  -- turn | fork | new_thread | merge
    changed_at    INTEGER NOT NULL
);
CREATE INDEX session_history_session ON session_history(session_label, id);

-- One row per accepted inbound message; (channel, msg_id) is unique forever.
CREATE TABLE inbound (
    id            INTEGER PRIMARY KEY,
    channel       TEXT NOT NULL,
    msg_id        TEXT NOT NULL,
    item_id       TEXT NOT NULL,
    session_label TEXT NOT NULL,
    entity_id     TEXT,
    sender_id     TEXT NOT NULL,
    sender_name   TEXT,
    peer_kind     TEXT NOT NULL,
    peer_id       TEXT NOT NULL,
    thread_id     TEXT,
    text          TEXT NOT NULL,
    ts            TEXT,
    queue_mode    TEXT,
    meta          TEXT,                           -- JSON object, NULL when empty
    received_at   INTEGER NOT NULL,
    UNIQUE (channel, msg_id)
);

-- The durable backlog. seq (the rowid) is the arrival order, assigned by the
-- single writer in commit order.
CREATE TABLE queue_items (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    session_label TEXT NOT NULL,
    source        TEXT NOT NULL,                  -- person | worker | timer | operator
    mode          TEXT,                           -- the mode requested with the item, if any
    inbound_id    INTEGER REFERENCES inbound(id),
    payload       TEXT,                           -- JSON for items that are not inbound messages
    status        TEXT NOT NULL DEFAULT 'queued', -- queued | running | done | dropped | cancelled
    reason        TEXT,
    turn_id       TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX queue_items_open ON queue_items(session_label, seq) WHERE status IN ('queued', 'running');
CREATE INDEX queue_items_closed ON queue_items(session_label, seq)
    WHERE status IN ('dropped', 'cancelled');
