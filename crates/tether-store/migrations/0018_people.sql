-- People and their personal API tokens (issue 28). A token is stored only as the SHA-256
-- of its secret; the secret is shown once, when it is made.
CREATE TABLE people (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT,
    role TEXT NOT NULL,
    disabled INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    last_seen_at INTEGER
);
CREATE UNIQUE INDEX people_by_email ON people (email) WHERE email IS NOT NULL;

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people (id),
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER,
    last_used_at INTEGER
);
CREATE INDEX api_tokens_of_person ON api_tokens (person_id, created_at);
