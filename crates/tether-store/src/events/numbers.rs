//! The integer numbers an event row is keyed by (migration 0030): a session's `num` and
//! its conversation's, with the conversation's id, remembered per session id once read.
//! A session never changes conversation and numbers are never reused, so an entry never
//! goes stale; the map is emptied when it grows past [`CAPACITY`] (a busy daemon reads
//! each live session's numbers again, one point read each).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tether_proto::{ConversationId, SessionId};

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
}
