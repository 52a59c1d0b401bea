-- Erasures (ledger/erasure.py), as the SQLite ledger's migration 0021 has them.
CREATE TABLE erasures (
    entity_id   text PRIMARY KEY,
    entities    text,
    sessions    text,
    senders     text,
    step        integer NOT NULL,
    cursor      text,
    counts      text NOT NULL,
    started_at  bigint NOT NULL,
    finished_at bigint
);
