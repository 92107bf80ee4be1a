-- Which node owns a conversation (issue 12): its live agent process runs there, and
-- every write on its behalf carries `epoch`, which rises on every claim (fencing). A
-- conversation whose owner's lease ended may be claimed by another node.
CREATE TABLE owners (
    conversation_id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    claimed_at INTEGER NOT NULL
);
CREATE INDEX owners_by_node ON owners (node_id);
