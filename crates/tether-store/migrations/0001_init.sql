CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    agent TEXT NOT NULL,
    model TEXT,
    cwd TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    bound_session_id TEXT,
    parent_conversation_id TEXT,
    next_session_reason TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    agent TEXT NOT NULL,
    model TEXT,
    cwd TEXT NOT NULL,
    status TEXT NOT NULL,
    external_id TEXT,
    last_seq INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX sessions_by_conversation ON sessions(conversation_id, created_at);

CREATE TABLE turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    result_text TEXT,
    stop_reason TEXT,
    error_code TEXT,
    error_message TEXT,
    usage TEXT,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER
);
CREATE INDEX turns_by_session ON turns(session_id, created_at);
CREATE INDEX turns_open ON turns(status) WHERE status IN ('queued', 'running', 'waiting_approval', 'waiting_user');

CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn_id TEXT,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE INDEX events_by_conversation ON events(conversation_id, id);

CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    title TEXT NOT NULL,
    kind TEXT,
    detail TEXT,
    options TEXT NOT NULL,
    status TEXT NOT NULL,
    decided_by TEXT,
    created_at INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    resolved_at INTEGER
);
CREATE INDEX approvals_pending ON approvals(status) WHERE status = 'pending';

CREATE TABLE questions (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL,
    answer TEXT,
    answered_by TEXT,
    created_at INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    resolved_at INTEGER
);
CREATE INDEX questions_pending ON questions(status) WHERE status = 'pending';

CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    role TEXT NOT NULL,
    text TEXT NOT NULL,
    session_id TEXT,
    turn_id TEXT,
    at INTEGER NOT NULL
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);

CREATE TABLE inbound_dedupe (
    source TEXT NOT NULL,
    key TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (source, key)
);
