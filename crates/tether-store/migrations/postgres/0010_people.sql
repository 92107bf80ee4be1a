-- SQLite's migration 0018 (issue 28): people and their personal API tokens.
CREATE TABLE people (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT,
    role TEXT NOT NULL,
    disabled BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT
);
CREATE UNIQUE INDEX people_by_email ON people (email) WHERE email IS NOT NULL;

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people (id),
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT,
    last_used_at BIGINT
);
CREATE INDEX api_tokens_of_person ON api_tokens (person_id, created_at);
