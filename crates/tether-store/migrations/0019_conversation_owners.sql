-- Who a conversation belongs to and who else sees it (issue 28). `owner_id` is NULL only
-- in a store upgraded from before people existed, until the first start gives those
-- conversations to the install's owner. The two indexes serve a member's list page: their
-- own conversations, and the team's, each read in order and merged.
ALTER TABLE conversations ADD COLUMN owner_id TEXT;
ALTER TABLE conversations ADD COLUMN visibility TEXT NOT NULL DEFAULT 'private';
CREATE INDEX conversations_by_owner ON conversations(owner_id, updated_at DESC, id);
CREATE INDEX conversations_by_visibility ON conversations(visibility, updated_at DESC, id);
