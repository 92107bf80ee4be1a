-- tether: breaks-older
-- Issue 33 item 1: the event table redesigned for the store's ceiling. Each event used to
-- update three B-trees keyed by 32-character text ids (the table's, `(session_id, seq)`,
-- `(conversation_id, id)`), look its session up twice (the foreign key, and the trigger
-- of migration 0005 keeping `sessions.last_seq`) and bump `sqlite_sequence`
-- (AUTOINCREMENT). Now conversations and sessions carry an integer `num`; an event row
-- holds the two numbers, its two indexes are integer keys, and its `seq` is the session's
-- largest + 1, read from `events_by_session` by the statement that inserts it (no counter,
-- no trigger). Ids stay as they were (events are never deleted, so the largest id + 1 is
-- never an id seen before). A contract step: older nodes would write the old columns.
ALTER TABLE conversations ADD COLUMN num INTEGER;
UPDATE conversations SET num = rowid;
CREATE UNIQUE INDEX conversations_by_num ON conversations(num);
CREATE TRIGGER conversations_num AFTER INSERT ON conversations
FOR EACH ROW WHEN NEW.num IS NULL
BEGIN
    UPDATE conversations SET num = (SELECT COALESCE(MAX(num), 0) + 1 FROM conversations)
    WHERE id = NEW.id;
END;

ALTER TABLE sessions ADD COLUMN num INTEGER;
UPDATE sessions SET num = rowid;
CREATE UNIQUE INDEX sessions_by_num ON sessions(num);
CREATE TRIGGER sessions_num AFTER INSERT ON sessions
FOR EACH ROW WHEN NEW.num IS NULL
BEGIN
    UPDATE sessions SET num = (SELECT COALESCE(MAX(num), 0) + 1 FROM sessions)
    WHERE id = NEW.id;
END;

CREATE TABLE events_numbered (
    id INTEGER PRIMARY KEY,
    conversation_num INTEGER NOT NULL,
    session_num INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    turn_id TEXT,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL
);
INSERT INTO events_numbered (id, conversation_num, session_num, seq, turn_id, at, kind, payload)
SELECT e.id, c.num, s.num, e.seq, e.turn_id, e.at, e.kind, e.payload
FROM events e JOIN sessions s ON s.id = e.session_id JOIN conversations c ON c.id = e.conversation_id
ORDER BY e.id;
DROP TRIGGER events_keep_session_seq;
DROP TABLE events;
ALTER TABLE sessions DROP COLUMN last_seq;
ALTER TABLE events_numbered RENAME TO events;
CREATE UNIQUE INDEX events_by_session ON events(session_num, seq);
CREATE INDEX events_by_conversation ON events(conversation_num, id);
