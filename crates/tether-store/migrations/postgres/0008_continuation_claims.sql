-- A continuation id in use (issue 26 item 2; SQLite's migration 0015): claimed in the
-- transaction that reads the ledger, replaced by the ledger entry when the request is
-- recorded, given back when it fails; free again once its node's lease ended.
CREATE TABLE continuation_claims (
    scope TEXT NOT NULL,
    continuation_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    claim TEXT NOT NULL,
    claimed_at BIGINT NOT NULL,
    PRIMARY KEY (scope, continuation_id)
);
