-- Delegation (DESIGN §8): a task is a `delegate` conversation (task_id = its id) with one
-- runtime session for its whole life; every turn of that session has a growing
-- turn_version; the continuation ledger makes continue/close idempotent per parent
-- conversation.

CREATE TABLE delegations (
    task_id TEXT PRIMARY KEY REFERENCES conversations(id),
    -- NULL for a task created by an external MCP client (API token).
    parent_conversation_id TEXT,
    parent_session_id TEXT,
    parent_turn_id TEXT,
    parent_tool_call_id TEXT,
    depth INTEGER NOT NULL,
    agent TEXT NOT NULL,
    cwd TEXT NOT NULL,
    task TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    released_at INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX delegations_by_parent ON delegations(parent_conversation_id, created_at);

CREATE TABLE delegation_turns (
    task_id TEXT NOT NULL REFERENCES delegations(task_id),
    turn_version INTEGER NOT NULL,
    turn_id TEXT NOT NULL UNIQUE REFERENCES turns(id),
    -- parent | person
    origin TEXT NOT NULL,
    -- The parent's turn that started this one (origin parent).
    parent_turn_id TEXT,
    -- When the outcome event went to the parent's session (NULL: not yet).
    reported_at INTEGER,
    PRIMARY KEY (task_id, turn_version)
);
CREATE INDEX delegation_turns_by_parent_turn ON delegation_turns(parent_turn_id);
CREATE INDEX delegation_turns_unreported ON delegation_turns(reported_at) WHERE reported_at IS NULL;

CREATE TABLE continuation_ledger (
    -- The task's parent conversation id ('external' for tasks without one).
    scope TEXT NOT NULL,
    continuation_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    -- continue | close
    action TEXT NOT NULL,
    message TEXT,
    -- The first result, as JSON.
    result TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (scope, continuation_id)
);
