-- SQLite migration 0022.
-- Sign-in on the page (issue 28): a browser's session, found by the SHA-256 of the secret
-- in its HttpOnly cookie, on any node; signing out deletes it, everywhere at once. An
-- OpenID Connect sign-in in flight keeps its nonce and PKCE verifier here under the
-- SHA-256 of its `state`, taken once by the callback (whichever node it reaches).
CREATE TABLE web_sessions (
    hash TEXT PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people (id),
    csrf TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX web_sessions_of_person ON web_sessions (person_id);

CREATE TABLE oidc_logins (
    state_hash TEXT PRIMARY KEY,
    nonce TEXT NOT NULL,
    verifier TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
