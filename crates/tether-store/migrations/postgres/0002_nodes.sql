-- The nodes serving this store (SQLite's migration 0009): each `tether serve` registers
-- itself and renews its lease (a heartbeat); a node whose lease ended is gone.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    addr TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    lease_until BIGINT NOT NULL
);
