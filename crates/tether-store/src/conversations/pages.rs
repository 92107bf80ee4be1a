//! Pages for clients that show long lists: the conversation list in pages (keyset on
//! `updated_at DESC, id`), a conversation's events and history read backwards from the
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

impl crate::Conversations<'_> {
    /// Ids of conversations whose row changed (see the module header).
    pub fn conversation_changes(self) -> broadcast::Receiver<ConversationId> {
        self.store.shared().changes.subscribe()
    }
}
