//! Pages for clients that show long lists: the conversation list in pages (keyset on
//! `updated_at DESC, id`), a conversation's events and history read backwards from the
//! end, and the notices of conversations whose list view may have changed (a row changed
//! without an event: created, renamed, archived, unbound, a turn queued; or a commit of
//! more than streamed agent output, sent by the feed at commit), so a list can follow
//! changes instead of polling.

use tether_proto::{ConversationId, EventEnvelope, HistoryMessage};
use tokio::sync::broadcast;

use crate::{ConversationRow, Result, Store, rows};

/// Change notices buffered per follower; a follower that lags re-reads its list.
pub(crate) const CHANGES_BUFFER: usize = 1024;

/// Where a page of the conversation list starts: after this `(updated_at_ms, id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub updated_at_ms: i64,
    pub id: ConversationId,
}

impl Store {
    /// Ids of conversations whose row changed (see the module header).
    pub fn conversation_changes(&self) -> broadcast::Receiver<ConversationId> {
        self.changes.subscribe()
    }

    /// Tells the followers that conversation `id` changed (after the write committed).
    pub(crate) fn changed(&self, id: &ConversationId) {
        // No follower is not an error (and costs no copy of the id).
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(id.clone());
        }
    }

    /// One page of conversations, most recently updated first (ties by id), after
    /// `cursor`.
    pub async fn list_conversations_page(
        &self,
        include_archived: bool,
        cursor: Option<&ListCursor>,
        limit: u32,
    ) -> Result<Vec<ConversationRow>> {
        let (at, id) = match cursor {
            Some(c) => (c.updated_at_ms, c.id.as_str()),
            None => (i64::MAX, ""),
        };
        let rows = sqlx::query(
            "SELECT * FROM conversations WHERE (? OR archived = 0) \
             AND (updated_at < ? OR (updated_at = ? AND id > ?)) \
             ORDER BY updated_at DESC, id LIMIT ?",
        )
        .bind(include_archived)
        .bind(at)
        .bind(at)
        .bind(id)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().map(rows::conversation).collect()
    }

    /// The last `limit` events of a conversation with `id < before_id` (all when
    /// `None`), oldest first.
    pub async fn conversation_events_before(
        &self,
        conversation_id: &ConversationId,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE conversation_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        )
        .bind(conversation_id.as_str())
        .bind(before_id.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().rev().map(rows::event).collect()
    }

    /// The last `limit` history messages with `id < before_id`, oldest first.
    pub async fn history_before(
        &self,
        conversation_id: &ConversationId,
        before_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE conversation_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        )
        .bind(conversation_id.as_str())
        .bind(before_id)
        .bind(limit)
        .fetch_all(&self.reader)
        .await?;
        rows.iter().rev().map(rows::message).collect()
    }
}
