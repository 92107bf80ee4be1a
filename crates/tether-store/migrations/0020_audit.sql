-- The audit log (issue 28): security-relevant actions, only ever appended. Read newest
-- first by id; on PostgreSQL the one table serves the whole cluster.
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    action TEXT NOT NULL,
    person_id TEXT,
    by_name TEXT NOT NULL,
    target TEXT,
    detail TEXT
);
