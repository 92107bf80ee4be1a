-- The indexes PostgreSQL's schema had and SQLite's lacked, found by the schema-parity
-- test (issue 27 item 4): a conversation's turns, and a turn's approvals and questions
-- (read each time a turn's status is recomputed). `events_by_turn` stays PostgreSQL's
-- only: on SQLite it would cost every streamed event an index write, and the one query
-- by turn reads a conversation's events through `events_by_conversation`.
CREATE INDEX turns_by_conversation ON turns(conversation_id, created_at);
CREATE INDEX approvals_by_turn ON approvals(turn_id);
CREATE INDEX questions_by_turn ON questions(turn_id);
