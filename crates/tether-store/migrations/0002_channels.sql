-- Channels (Telegram, Feishu): which chat is which conversation, the durable outbox,
-- the per-user allowlist granted by pairing, pairing codes, and small per-channel state
-- (the Telegram update offset).

CREATE TABLE channel_chats (
    channel TEXT NOT NULL,
    -- The chat, the forum topic or (per-user group mode) the user in the chat.
    chat_key TEXT NOT NULL,
    conversation_id TEXT NOT NULL UNIQUE REFERENCES conversations(id),
    -- Where replies go (JSON, channel-specific).
    address TEXT NOT NULL,
    -- The last conversation event id already turned into outbox rows.
    event_cursor INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (channel, chat_key)
);

CREATE TABLE channel_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    -- The ordering lane: rows of one lane are delivered in id order.
    chat_key TEXT NOT NULL,
    dedupe_key TEXT NOT NULL,
    -- 'send' or 'edit'.
    op TEXT NOT NULL,
    -- For 'edit': the dedupe key of the sent message to edit.
    target_key TEXT,
    address TEXT NOT NULL,
    body TEXT NOT NULL,
    -- Bumped whenever the body is replaced (coalesced edits).
    version INTEGER NOT NULL DEFAULT 0,
    -- 'pending', 'sent', 'failed' or 'skipped'.
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error TEXT,
    -- The platform's message id once sent.
    remote_id TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (channel, dedupe_key)
);
CREATE INDEX channel_outbox_pending ON channel_outbox(channel, chat_key, id) WHERE status = 'pending';

CREATE TABLE channel_allowed_users (
    channel TEXT NOT NULL,
    user_id TEXT NOT NULL,
    added_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (channel, user_id)
);

CREATE TABLE channel_pairings (
    code TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    user_id TEXT NOT NULL,
    user_name TEXT NOT NULL,
    chat_key TEXT NOT NULL,
    address TEXT NOT NULL,
    -- 'pending' or 'approved'.
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    approved_at INTEGER,
    approved_by TEXT
);
CREATE INDEX channel_pairings_by_user ON channel_pairings(channel, user_id, status);

CREATE TABLE channel_state (
    channel TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (channel, key)
);
