-- One row that `GET /api/v1/ready` writes (issue 25): on SQLite a full disk or a
-- read-only file system fails writes while reads still answer, so readiness is a write.
CREATE TABLE ready_probe (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL
);
