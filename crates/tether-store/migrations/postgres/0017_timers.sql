-- SQLite migration 0025.
-- The durable timer facility (issue 29; schedules use it too): a timer is due at a
-- moment, claimed by one node at a time (the claim lapses if that node dies before it
-- fires), and fired or cancelled once. `attempt` counts the continuations of one
-- parked turn.
CREATE TABLE timers (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    account TEXT,
    due_at BIGINT NOT NULL,
    state TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    payload TEXT NOT NULL,
    claimed_by TEXT,
    claimed_until BIGINT,
    created_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE INDEX timers_due ON timers (state, due_at);
CREATE INDEX timers_by_conversation ON timers (conversation_id, state);
CREATE INDEX timers_by_account ON timers (account, state);
-- An account known to be at its vendor's limit until a moment: new turns on it are
-- parked at once instead of asking the vendor again.
CREATE TABLE account_limits (
    account TEXT PRIMARY KEY,
    until_ms BIGINT NOT NULL,
    reason TEXT NOT NULL
);
