-- One person across channels (issue 28): a channel account (Telegram user id, Slack user,
-- Discord user, Feishu open_id) belongs to at most one person; one-time link codes, stored
-- only as the SHA-256 of the code, confirm a link from the channel side or the page side.
CREATE TABLE channel_accounts (
    channel TEXT NOT NULL,
    user_id TEXT NOT NULL,
    user_name TEXT NOT NULL,
    person_id TEXT NOT NULL REFERENCES people (id),
    linked_at INTEGER NOT NULL,
    linked_by TEXT NOT NULL,
    PRIMARY KEY (channel, user_id)
);
CREATE INDEX channel_accounts_of_person ON channel_accounts (person_id);

-- A code made on a channel (`/link`) carries the account and waits for a person; one made
-- on the page carries the person and waits for an account.
CREATE TABLE link_codes (
    hash TEXT PRIMARY KEY,
    channel TEXT,
    user_id TEXT,
    user_name TEXT,
    person_id TEXT REFERENCES people (id),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER
);

-- A conversation may now be in one chat per channel (`/here` carries it from Slack to
-- Telegram), not in one chat overall; which chat its replies go to (the one its latest
-- channel message came from) is `muted` on the others. SQLite changes a constraint by
-- rebuilding the table (nothing references it).
CREATE TABLE channel_chats_new (
    channel TEXT NOT NULL,
    chat_key TEXT NOT NULL,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    address TEXT NOT NULL,
    event_cursor INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    muted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, chat_key),
    UNIQUE (channel, conversation_id)
);
INSERT INTO channel_chats_new (channel, chat_key, conversation_id, address, event_cursor,
    created_at)
    SELECT channel, chat_key, conversation_id, address, event_cursor, created_at
    FROM channel_chats;
DROP TABLE channel_chats;
ALTER TABLE channel_chats_new RENAME TO channel_chats;
CREATE INDEX channel_chats_of_conversation ON channel_chats (conversation_id);
