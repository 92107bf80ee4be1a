-- The events table keeps its session's `last_seq` counter up to date itself, so a
-- single event can be appended with one autocommit statement (seq = last_seq + 1 read in
-- the INSERT) instead of BEGIN / UPDATE / INSERT / COMMIT. Appends that bump the counter
-- first (batches, appends inside larger transactions) are unaffected: the guard makes
-- the trigger a no-op when the counter is already there.
CREATE TRIGGER events_keep_session_seq AFTER INSERT ON events
FOR EACH ROW WHEN NEW.seq > (SELECT last_seq FROM sessions WHERE id = NEW.session_id)
BEGIN
    UPDATE sessions SET last_seq = NEW.seq, updated_at = NEW.at WHERE id = NEW.session_id;
END;
