-- Attachments (issue 13): one row per file sent with a message. The bytes live in the
-- data dir under their SHA-256 (`attachments/<2 hex>/<sha256>`), once per content
-- however many rows name them; a blob no row names any more is deleted. `turn_id` is
-- set when the message that carries the attachment becomes a turn (an attachment is
-- sent once).

CREATE TABLE attachments (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    mime TEXT NOT NULL,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    turn_id TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX attachments_by_conversation ON attachments(conversation_id);
CREATE INDEX attachments_by_turn ON attachments(turn_id) WHERE turn_id IS NOT NULL;
CREATE INDEX attachments_by_sha256 ON attachments(sha256);
