-- A file tether sends out with a reply (`/file <path>`) belongs to that history message,
-- not to a turn: `message_id` names it, so the history shows the file with the reply.
ALTER TABLE attachments ADD COLUMN message_id INTEGER;
CREATE INDEX attachments_by_message ON attachments(message_id) WHERE message_id IS NOT NULL;
