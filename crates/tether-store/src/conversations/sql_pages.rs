//! Pages for clients that show long lists: the conversation list in pages (keyset on
//! `updated_at DESC, id`), a conversation's events and history read backwards from the
//! end, and the notices of conversations whose list view may have changed (a row changed
//! without an event: created, renamed, archived, unbound, a turn queued; or a commit of
//! more than streamed agent output, sent by the feed at commit), so a list can follow
//! changes instead of polling.

use tether_proto::{ConversationId, EventEnvelope, HistoryMessage, PersonId};

use super::{Db, rows};
use crate::{ConversationRow, ListCursor, Result};

impl Db {
    /// Tells the followers that conversation `id` changed (after the write committed).
    pub(crate) fn changed(&self, id: &ConversationId) {
        self.shared.changed(id);
    }

    /// One page of conversations, most recently updated first (ties by id), after
    /// `cursor`: every conversation, or (`viewer`) only those a member sees — their own
    /// and the team's, each read in order from its own index and merged, so a page costs
    /// two short index scans however many conversations others have.
    pub async fn list_conversations_page(
        &self,
        include_archived: bool,
        cursor: Option<&ListCursor>,
        limit: u32,
        viewer: Option<&PersonId>,
    ) -> Result<Vec<ConversationRow>> {
        let (at, id) = match cursor {
            Some(c) => (c.updated_at_ms, c.id.as_str()),
            None => (i64::MAX, ""),
        };
        // Keyset: `updated_at <= at` bounds the index range; the rest breaks ties.
        const AFTER: &str = "($1 OR archived = 0) AND updated_at <= $2 \
             AND (updated_at < $2 OR id > $3)";
        let sql = match viewer {
            None => format!(
                "SELECT * FROM conversations WHERE {AFTER} \
                 ORDER BY updated_at DESC, id LIMIT $4"
            ),
            Some(_) => format!(
                "SELECT * FROM ( \
                 SELECT * FROM (SELECT * FROM conversations WHERE owner_id = $5 \
                 AND visibility <> 'team' AND {AFTER} ORDER BY updated_at DESC, id LIMIT $4) AS mine \
                 UNION ALL \
                 SELECT * FROM (SELECT * FROM conversations WHERE visibility = 'team' \
                 AND {AFTER} ORDER BY updated_at DESC, id LIMIT $4) AS team \
                 ) AS seen ORDER BY updated_at DESC, id LIMIT $4"
            ),
        };
        let mut query = sqlx::query(&sql)
            .bind(include_archived)
            .bind(at)
            .bind(id)
            .bind(i64::from(limit));
        if let Some(viewer) = viewer {
            query = query.bind(viewer.as_str());
        }
        let rows = query.fetch_all(&self.reader).await?;
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
            super::rows::select_events!(
                "WHERE e.conversation_num = (SELECT num FROM conversations WHERE id = $1) \
                 AND e.id < $2 ORDER BY e.id DESC LIMIT $3"
            ),
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
