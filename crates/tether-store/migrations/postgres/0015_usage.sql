-- SQLite migration 0023.
-- The usage ledger (issue 29): one row per usage report an agent sent, written when it
-- arrives, never rebuilt from transcripts; archiving a conversation keeps its rows.
-- `cost_nanos` is NULL when the price table had no price for the model (an unknown cost,
-- never a silent zero); `price_version` is the table it was priced with.
CREATE TABLE usage_ledger (
    id BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    conversation_id TEXT NOT NULL,
    root_conversation_id TEXT NOT NULL,
    session_id TEXT,
    turn_id TEXT,
    person_id TEXT,
    agent TEXT NOT NULL,
    model TEXT,
    account TEXT,
    input_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    reasoning_tokens BIGINT NOT NULL,
    cost_nanos BIGINT,
    price_version TEXT NOT NULL
);
CREATE INDEX usage_by_conversation ON usage_ledger (conversation_id, at);
CREATE INDEX usage_by_root ON usage_ledger (root_conversation_id, at);
CREATE INDEX usage_by_person ON usage_ledger (person_id, at);
CREATE INDEX usage_by_turn ON usage_ledger (turn_id);
CREATE INDEX usage_by_session ON usage_ledger (session_id);
