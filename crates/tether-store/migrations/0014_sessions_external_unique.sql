-- One agent session id, one session (issue 26 item 5): two session rows of one agent
-- never carry the same external id (the runtime refuses a duplicate before it gets here;
-- this keeps the rows right whatever writes them).
CREATE UNIQUE INDEX sessions_by_external_id ON sessions(agent, external_id)
    WHERE external_id IS NOT NULL;
