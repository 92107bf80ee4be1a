-- Commands forwarded between the nodes of a cluster (issue 12): a node that is not a
-- conversation's owner stores the command here for the owner (`to_node`), which takes it
-- (`pending` → `taken`, conditionally), runs it and stores its reply (`answered`); the
-- sender reads the reply and removes the row. A command nobody took before its owner died
-- is `abandoned` by its sender and routed again.
CREATE TABLE commands (
    id TEXT PRIMARY KEY,
    to_node TEXT NOT NULL,
    from_node TEXT NOT NULL,
    conversation_id TEXT,
    body TEXT NOT NULL,
    status TEXT NOT NULL,
    reply TEXT,
    created_at INTEGER NOT NULL,
    taken_at INTEGER,
    answered_at INTEGER
);
CREATE INDEX commands_by_node ON commands (to_node, status, created_at);
