//! Pages for clients that show long lists: the conversation list in pages (keyset on
//! `updated_at DESC, id`), a session's turns in pages (keyset on `created_at, rowid`), a
//! conversation's events and history read backwards from the
//! end, and the notices of conversations whose list view may have changed (a row changed
//! without an event: created, renamed, archived, unbound, a turn queued; or a commit of
//! more than streamed agent output, sent by the feed at commit), so a list can follow
//! changes instead of polling.

use tether_proto::ConversationId;
use tokio::sync::broadcast;

/// Change notices buffered per follower; a follower that lags re-reads its list.
pub(crate) const CHANGES_BUFFER: usize = 1024;

/// Where a page of the conversation list starts: after this `(updated_at_ms, id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub updated_at_ms: i64,
    pub id: ConversationId,
}

/// Where a turn stands in its session's list (`created_at`, then the order rows were
/// inserted): a page of the list starts after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnPlace {
    pub created_at_ms: i64,
    pub row: i64,
}

impl crate::Conversations<'_> {
    /// Ids of conversations whose row changed (see the module header).
    pub fn conversation_changes(self) -> broadcast::Receiver<ConversationId> {
        self.store.shared().changes.subscribe()
    }
}
