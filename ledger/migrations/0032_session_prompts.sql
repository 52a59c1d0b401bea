-- A session's system prompt, as its latest turn that gave one left it, in a table of
-- its own instead of a column of the session row: every turn's commit rewrites that
-- row (the head, the totals, updated_at), and a prompt is written only when it
-- changes, so the row a commit rewrites stays narrow (docs/performance.md). The
-- prompt goes with its session (its erasure, the library's delete).
CREATE TABLE session_prompts (
    session_label TEXT PRIMARY KEY REFERENCES sessions(label) ON DELETE CASCADE,
    system_prompt TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO session_prompts (session_label, system_prompt)
    SELECT label, system_prompt FROM sessions WHERE system_prompt IS NOT NULL;
ALTER TABLE sessions DROP COLUMN system_prompt;
