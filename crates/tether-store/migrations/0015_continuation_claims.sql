-- A continuation id in use (issue 26 item 2): claimed in the transaction that reads the
-- ledger, before a continue or close does anything, by the node that runs it; the ledger
-- entry replaces it in the transaction that records the request, and a failed request
-- gives it back. Another request for the id meanwhile, on any node, is refused
-- (`continuation_conflict`). A claim of a node whose lease ended is free again.
CREATE TABLE continuation_claims (
    scope TEXT NOT NULL,
    continuation_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    -- Names this claim (a node may claim the id again after a restart).
    claim TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    PRIMARY KEY (scope, continuation_id)
);
