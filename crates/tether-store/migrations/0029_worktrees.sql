-- Issue 32: conversations that run in a git worktree of their own (see
-- `tether-store/src/worktrees`). Expand only.
CREATE TABLE worktrees (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    repo TEXT NOT NULL,
    path TEXT NOT NULL,
    branch TEXT NOT NULL,
    base TEXT NOT NULL,
    status TEXT NOT NULL,
    snapshot TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
