-- Merge proposals (ledger/proposals.py): an agent's `propose_merge` says that a
-- contact entity is a person entity, and an operator (`merge.accept`) or an owner
-- in chat (`/merge yes N`) accepts or rejects it. `id` is the N people type. The
-- reason is the agent's words; the rows of an erased person go with them.
CREATE TABLE merge_proposals (
    id            INTEGER PRIMARY KEY,
    contact       TEXT NOT NULL,                 -- the entity proposed to merge ...
    person        TEXT NOT NULL,                 -- ... into this one (it stays canonical)
    reason        TEXT NOT NULL,
    session_label TEXT,                          -- the session whose turn proposed it
    turn_id       TEXT,
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'accepted', 'rejected')),
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER,
    decided_by    TEXT                           -- 'uid:<n>' (an operator) or 'owner:<channel>:<sender>'
);
CREATE INDEX merge_proposals_pending ON merge_proposals(id) WHERE status = 'pending';
