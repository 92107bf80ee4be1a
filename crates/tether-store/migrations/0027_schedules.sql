-- Scheduled turns (issue 30): a schedule sends its prompt to its conversation at each
-- run; the run is a timer of kind `schedule_run` (`timer_id`, the one waiting), whose id
-- is the run's turn id. `kind`/`expr` say when (cron, every N seconds, once at), in the
-- time zone `tz`; `start_at` anchors intervals.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    owner_id TEXT,
    owner_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    expr TEXT NOT NULL,
    tz TEXT NOT NULL,
    prompt TEXT NOT NULL,
    fresh_session INTEGER NOT NULL,
    missed TEXT NOT NULL,
    state TEXT NOT NULL,
    failures INTEGER NOT NULL,
    next_run_at INTEGER,
    last_run_at INTEGER,
    last_turn_id TEXT,
    note TEXT,
    timer_id TEXT,
    start_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX schedules_by_conversation ON schedules (conversation_id);
