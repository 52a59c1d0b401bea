-- Threads and resets (ledger/threads.py). A session's turns fall into threads,
-- one after another: `/new`, `/reset`, `session.reset` and the reset policies
-- each begin a new one. Nothing is deleted: an old thread's turns stay in the
-- tree, searchable and forkable.

-- The session's current thread: its number (1 is the first), when it began
-- (NULL for thread 1: with the session), and `turns` when it began (NULL while
-- it waits for its cut: see `threads.status`).
ALTER TABLE sessions ADD COLUMN thread INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sessions ADD COLUMN thread_started_at INTEGER;
ALTER TABLE sessions ADD COLUMN thread_turns_base INTEGER DEFAULT 0;

-- When a person last wrote to each session: only their messages count as
-- activity. Written with every person's message, so a row of its own: about
-- half the writer's cost of updating the wide `sessions` row (docs/performance.md).
CREATE TABLE person_activity (
    session_label TEXT PRIMARY KEY,
    at            INTEGER NOT NULL
) WITHOUT ROWID;

-- Every thread after a session's first, with why and when it began. A thread
-- decided while a turn ran is `pending` until its session's actor cuts the
-- head (before the next turn); the cut fills in how the thread before it ended.
CREATE TABLE threads (
    session_label TEXT NOT NULL,
    n             INTEGER NOT NULL,   -- 2, 3, ...
    reason        TEXT NOT NULL,      -- new | operator | idle | daily | turn_limit
    started_at    INTEGER NOT NULL,   -- when it was decided
    item_id       TEXT,               -- the message whose arrival decided it (idle, daily, turn_limit)
    status        TEXT NOT NULL,      -- pending | started
    prev_base     INTEGER,            -- `turns` when the thread before it began
    cut_at        INTEGER,
    prev_head     TEXT,               -- the head the thread before it ended with
    prev_turns    INTEGER,            -- that thread's turns (NULL: from before this migration)
    carry_turn_id TEXT,               -- the compaction turn it began from (automatic rollovers)
    PRIMARY KEY (session_label, n)
) WITHOUT ROWID;
CREATE INDEX threads_pending ON threads(session_label) WHERE status = 'pending';

-- `/new` before this migration: a thread each, its turn count unknown; the
-- current thread's turns count from here on.
INSERT INTO threads (session_label, n, reason, started_at, status, cut_at, prev_head)
SELECT session_label,
       1 + row_number() OVER (PARTITION BY session_label ORDER BY id),
       'new', changed_at, 'started', changed_at, prev_turn_id
FROM session_history WHERE reason = 'new_thread';
UPDATE sessions SET
    thread = 1 + (SELECT count(*) FROM threads WHERE threads.session_label = sessions.label),
    thread_started_at = (SELECT max(started_at) FROM threads
                         WHERE threads.session_label = sessions.label),
    thread_turns_base = turns
WHERE label IN (SELECT session_label FROM threads);
