//! The feed's reads and its publication at commit (compiled once per backend; the feed
//! itself is `crate::events::feed`).

use tether_proto::{ConversationId, EventEnvelope, SessionId};

use super::conns::Tx;
use super::{Db, rows};
use crate::Result;

impl Db {
    /// The conversation of a session (`None`: no such session).
    pub(crate) async fn session_conversation(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<ConversationId>> {
        let conv: Option<(String,)> =
            sqlx::query_as("SELECT conversation_id FROM sessions WHERE id = $1")
                .bind(session_id.as_str())
                .fetch_optional(&self.reader)
                .await?;
        Ok(conv.map(|(c,)| ConversationId::from(c)))
    }

    /// Stored events of a conversation (or of one of its sessions) with `after < id <=
    /// until`, in commit order, at most `limit`.
    pub(crate) async fn events_window(
        &self,
        conversation_id: &ConversationId,
        session_id: Option<&SessionId>,
        after: i64,
        until: i64,
        limit: u32,
    ) -> Result<Vec<EventEnvelope>> {
        let rows = match session_id {
            Some(sid) => {
                sqlx::query(
                    super::rows::select_events!(
                        "WHERE e.session_num = (SELECT num FROM sessions WHERE id = $1) \
                         AND e.id > $2 AND e.id <= $3 ORDER BY e.seq LIMIT $4"
                    ),
                )
                .bind(sid.as_str())
                .bind(after)
                .bind(until)
                .bind(i64::from(limit))
                .fetch_all(&self.reader)
                .await?
            }
            None => {
                sqlx::query(
                    super::rows::select_events!(
                        "WHERE e.conversation_num = (SELECT num FROM conversations WHERE id = $1) \
                         AND e.id > $2 AND e.id <= $3 ORDER BY e.id LIMIT $4"
                    ),
                )
                .bind(conversation_id.as_str())
                .bind(after)
                .bind(until)
                .bind(i64::from(limit))
                .fetch_all(&self.reader)
                .await?
            }
        };
        rows.iter().map(rows::event).collect()
    }

    /// The id of the conversation's newest stored event (0: none).
    pub(crate) async fn newest_event_id(&self, conversation_id: &ConversationId) -> Result<i64> {
        let (last,): (Option<i64>,) =
            sqlx::query_as(
                "SELECT MAX(id) FROM events \
                 WHERE conversation_num = (SELECT num FROM conversations WHERE id = $1)",
            )
                .bind(conversation_id.as_str())
                .fetch_one(&self.reader)
                .await?;
        Ok(last.unwrap_or(0))
    }

    /// Commits `tx`, which appended exactly `events`, and publishes them before the writer
    /// connection is free again (see the module header). Every transaction that appends
    /// events commits through here, after its fence (see `fence`: refused, it rolls back).
    pub(super) async fn commit_events(&self, mut tx: Tx, events: &[EventEnvelope]) -> Result<()> {
        self.check_fence(&mut tx).await?;
        debug_assert_eq!(
            tx.appended(),
            events.len(),
            "a transaction must publish every event it appended"
        );
        let changed = tx
            .commit_then(|| {
                // Before the writer is let go: the next writer sees these `seq`s.
                if super::dialect::EVENTS_AT_ONCE.is_some() {
                    self.shared.numbers.committed(events);
                }
                self.shared.feed.publish(events)
            })
            .await?;
        for id in changed {
            self.changed(&id);
        }
        // For the other nodes' tails (PostgreSQL; on SQLite an empty look-up).
        self.shared.outbound.events(events);
        Ok(())
    }
}
