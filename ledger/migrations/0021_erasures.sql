-- Erasures (ledger/erasure.py): one row per `entity.erase`, written by the short
-- transaction that marks the person erased and advanced by each bounded step
-- after it, so a restart resumes an erasure a crash cut off. Once it is done
-- only the entity's id, the counts and the times remain: the lists that named
-- the person's entities, sessions and contacts are cleared.
CREATE TABLE erasures (
    entity_id   TEXT PRIMARY KEY,   -- the entity the operator named
    entities    TEXT,               -- JSON list: its union-find set; NULL once done
    sessions    TEXT,               -- JSON list: their sessions; NULL once done
    senders     TEXT,               -- JSON list of [channel, sender_id]; NULL once done
    step        INTEGER NOT NULL,   -- the next step to run (ledger/erasure.py STEPS)
    cursor      TEXT,               -- JSON: where that step's sweep stopped
    counts      TEXT NOT NULL,      -- JSON {"sessions", "messages", "files"}
    started_at  INTEGER NOT NULL,
    finished_at INTEGER             -- NULL while it runs
) WITHOUT ROWID;
