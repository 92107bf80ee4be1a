-- Work that runs once per cluster (issue 12; SQLite's migration 0013): a leader lease
-- per name (a channel's poller, pump and outbox; the sweeps). The leader holds it while
-- its own node lease in `nodes` holds; another node takes it over once that lease ends,
-- and the epoch rises on every claim.
CREATE TABLE leaders (
    name TEXT PRIMARY KEY,
    -- '' once released (the next claim still raises the epoch).
    node_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    claimed_at BIGINT NOT NULL
);

-- Outbox claims: a sender claims a row until `claim_until` before it sends it (`FOR
-- UPDATE SKIP LOCKED`), so two nodes draining one channel never send the same row; a
-- crashed sender's claim runs out.
ALTER TABLE channel_outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE channel_outbox ADD COLUMN claim_until BIGINT NOT NULL DEFAULT 0;
