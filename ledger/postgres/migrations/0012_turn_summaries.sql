-- Turn summaries, turn metadata, the session's prompt and model, and a strict
-- per-session sequence on events, as the SQLite ledger's migration turn_summaries has it.
ALTER TABLE turns ADD COLUMN IF NOT EXISTS summary text;
ALTER TABLE turns ADD COLUMN IF NOT EXISTS metadata text;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS system_prompt text;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS model text;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS event_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE turn_events ADD COLUMN IF NOT EXISTS session_seq bigint;
ALTER TABLE turn_events DROP CONSTRAINT IF EXISTS turn_events_type_check;
ALTER TABLE turn_events ADD CONSTRAINT turn_events_type_check CHECK (type IN (
    'intent', 'action', 'file', 'snapshot', 'decision', 'error', 'llm', 'feedback',
    'validation_gate', 'memory_recall', 'system_event'));
UPDATE turn_events e SET session_seq = n.seq
    FROM (SELECT turn_id, seq AS turn_seq, row_number() OVER (
              PARTITION BY session_label ORDER BY created_at, turn_id, seq) AS seq
          FROM turn_events) n
    WHERE e.turn_id = n.turn_id AND e.seq = n.turn_seq;
UPDATE sessions SET event_seq = coalesce(
    (SELECT max(session_seq) FROM turn_events e WHERE e.session_label = sessions.label), 0);
