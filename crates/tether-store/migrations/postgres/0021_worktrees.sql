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
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
-- Whether the conversation's sessions work in its worktree (read with the row, so a
-- session of a conversation that is not isolated costs no look-up).
ALTER TABLE conversations ADD COLUMN isolated BIGINT NOT NULL DEFAULT 0;
-- Issue 31: the trace a channel message belongs to (its turn's), so its delivery joins
-- the turn's trace.
ALTER TABLE channel_outbox ADD COLUMN traceparent TEXT;
