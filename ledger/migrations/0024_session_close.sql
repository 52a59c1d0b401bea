-- Sessions that end (ledger/closing.py): when a session was closed, the summary it
-- closed with, and, for the session a closed one's next message opened, the
-- session it extends. All NULL for a session that never closed.
ALTER TABLE sessions ADD COLUMN ended_at INTEGER;
ALTER TABLE sessions ADD COLUMN closing_summary TEXT;
ALTER TABLE sessions ADD COLUMN extends TEXT;
-- A daemon session's slug, made with its title from its first message (core/titles.py).
ALTER TABLE sessions ADD COLUMN slug TEXT;
