-- A session's system prompt in a table of its own, as the SQLite ledger's migration
-- `session_prompts` keeps it: the session row every turn's commit rewrites stays
-- narrow, and the prompt, written only when it changes, goes with its session.
CREATE TABLE session_prompts (
    session_label TEXT PRIMARY KEY REFERENCES sessions(label) ON DELETE CASCADE,
    system_prompt TEXT NOT NULL
);
INSERT INTO session_prompts (session_label, system_prompt)
    SELECT label, system_prompt FROM sessions WHERE system_prompt IS NOT NULL;
ALTER TABLE sessions DROP COLUMN system_prompt;
