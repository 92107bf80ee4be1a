-- The conversation list pages newest first (`updated_at DESC, id`): read it from an
-- index instead of sorting every conversation for each page.
CREATE INDEX conversations_by_updated ON conversations(updated_at DESC, id);
