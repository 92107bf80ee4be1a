-- SQLite's migration 0016, for the schema-parity test: PostgreSQL's `/ready` reads and
-- does not write it (a full disk there is the server's, which answers with an error).
CREATE TABLE ready_probe (
    id INTEGER PRIMARY KEY,
    at BIGINT NOT NULL
);
