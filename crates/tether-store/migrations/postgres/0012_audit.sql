-- SQLite's migration 0020 (issue 28): the audit log, only ever appended.
CREATE TABLE audit (
    id BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    action TEXT NOT NULL,
    person_id TEXT,
    by_name TEXT NOT NULL,
    target TEXT,
    detail TEXT
);
