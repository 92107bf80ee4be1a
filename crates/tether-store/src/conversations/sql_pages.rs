//! Pages for clients that show long lists: the conversation list in pages (keyset on
//! `updated_at DESC, id`), a conversation's events and history read backwards from the
//! end, and the notices of conversations whose list view may have changed (a row changed
//! without an event: created, renamed, archived, unbound, a turn queued; or a commit of
//! more than streamed agent output, sent by the feed at commit), so a list can follow
//! changes instead of polling.

use tether_proto::{ConversationId, EventEnvelope, HistoryMessage};

use super::{Db, rows};
use crate::{ConversationRow, ListCursor, Result};

impl Db {
    /// Tells the followers that conversation `id` changed (after the write committed).
    pub(crate) fn changed(&self, id: &ConversationId) {
        self.shared.changed(id);
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
            "SELECT * FROM conversations WHERE ($1 OR archived = 0) \
             AND (updated_at < $2 OR (updated_at = $3 AND id > $4)) \
             ORDER BY updated_at DESC, id LIMIT $5",
        )
        .bind(include_archived)
        .bind(at)
        .bind(at)
        .bind(id)
        .bind(i64::from(limit))
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
            "SELECT * FROM events WHERE conversation_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(conversation_id.as_str())
        .bind(before_id.unwrap_or(i64::MAX))
        .bind(i64::from(limit))
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
            "SELECT * FROM messages WHERE conversation_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(conversation_id.as_str())
        .bind(before_id)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await?;
        rows.iter().rev().map(rows::message).collect()
    }
}
