//! The integer numbers an event row is keyed by (migration 0030): a session's `num` and
//! its conversation's, with the conversation's id, remembered per session id once read.
//! A session never changes conversation and numbers are never reused, so an entry never
//! goes stale; the map is emptied when it grows past [`CAPACITY`] (a busy daemon reads
//! each live session's numbers again, one point read each).
//!
//! Beside them, each session's largest `seq` this process saw committed (only where the
//! dialect stores groups of events at once, i.e. SQLite, whose one writer connection is
//! this process's): recorded only from events the database confirmed committed (at
//! commit, before the writer is let go, or after a lost answer's read-back), the largest
//! winning, and events are never deleted, so it is never ahead of the database. It is
//! behind when something else wrote the file, or after a commit whose events were not
//! recorded (an append reported abandoned); then the unique index refuses the insert
//! that trusted it, and the group is stored by the statement that reads the `seq`
//! (`events/sql_append_at_once.rs`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tether_proto::{ConversationId, EventEnvelope, SessionId};

/// Most sessions remembered at once.
const CAPACITY: usize = 65_536;

/// The numbers of one session.
#[derive(Debug, Clone)]
pub(crate) struct SessionNums {
    pub(crate) session: i64,
    pub(crate) conversation: i64,
    pub(crate) conversation_id: ConversationId,
}

/// Sessions' numbers read so far.
#[derive(Default)]
pub(crate) struct Numbers {
    map: Mutex<HashMap<SessionId, SessionNums>>,
    /// Each session's largest `seq` seen committed (see the module header).
    seqs: Mutex<HashMap<SessionId, i64>>,
}

impl Numbers {
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, SessionNums>> {
        // Inserts and reads only: a panic while holding it leaves a consistent map.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, id: &SessionId) -> Option<SessionNums> {
        self.lock().get(id).cloned()
    }

    pub(crate) fn remember(&self, id: &SessionId, nums: &SessionNums) {
        let mut map = self.lock();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(id.clone(), nums.clone());
    }

    fn lock_seqs(&self) -> MutexGuard<'_, HashMap<SessionId, i64>> {
        // Inserts, raises and removals only: a panic leaves values no higher than the
        // database's.
        self.seqs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Session `id`'s largest `seq` seen committed, if any.
    pub(crate) fn last_seq(&self, id: &SessionId) -> Option<i64> {
        self.lock_seqs().get(id).copied()
    }

    /// Records the `seq`s of committed `events` (each session's largest wins).
    pub(crate) fn committed(&self, events: &[EventEnvelope]) {
        if events.is_empty() {
            return;
        }
        let mut seqs = self.lock_seqs();
        if seqs.len() >= CAPACITY {
            seqs.clear();
        }
        // A commit is nearly always one session's: one look-up per run of a session.
        let mut run: Option<(&SessionId, i64)> = None;
        for ev in events {
            match &mut run {
                Some((session, largest)) if **session == ev.session_id => {
                    *largest = (*largest).max(ev.seq);
                }
                _ => {
                    if let Some((session, largest)) = run {
                        raise(&mut seqs, session, largest);
                    }
                    run = Some((&ev.session_id, ev.seq));
                }
            }
        }
        if let Some((session, largest)) = run {
            raise(&mut seqs, session, largest);
        }
    }

    /// Forgets session `id`'s `seq` (the database had more than it said).
    pub(crate) fn forget_seq(&self, id: &SessionId) {
        self.lock_seqs().remove(id);
    }
}

fn raise(seqs: &mut HashMap<SessionId, i64>, id: &SessionId, seq: i64) {
    match seqs.get_mut(id) {
        Some(known) => *known = (*known).max(seq),
        None => {
            seqs.insert(id.clone(), seq);
        }
    }
}
