-- Inbound channel updates kept until handled: the raw update is stored in the same
-- transaction as its dedupe key, so an update that was accepted (and whose polling offset
-- moved on) survives a crash and is replayed, in order, at start-up until its lane marks
-- it handled.

CREATE TABLE channel_inbound (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    key TEXT NOT NULL,
    -- The raw update (JSON, channel-specific).
    payload TEXT NOT NULL,
    handled INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    UNIQUE (channel, key)
);
CREATE INDEX channel_inbound_unhandled ON channel_inbound(channel, id) WHERE handled = 0;
