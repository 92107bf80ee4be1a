-- The nodes serving this store (issue 12): each `tether serve` registers itself and
-- renews its lease (a heartbeat); a node whose lease ended is gone. On SQLite there is
-- only ever one; on PostgreSQL every node of a cluster has a row.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    addr TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    lease_until INTEGER NOT NULL
);
