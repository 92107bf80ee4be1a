-- One agent session id, one session (issue 26 item 5; SQLite's migration 0014): two
-- session rows of one agent never carry the same external id.
CREATE UNIQUE INDEX sessions_by_external_id ON sessions(agent, external_id)
    WHERE external_id IS NOT NULL;
