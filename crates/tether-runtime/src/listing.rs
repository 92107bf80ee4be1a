//! Reading for clients that show long lists: the conversation list and a session's turns
//! in pages (an opaque cursor), a conversation's events and history backwards from the end, and the ids of
//! conversations whose row changed without an event (see `tether_store::pages`).

use tether_proto::{
    Conversation, ConversationEventPage, ConversationId, HistoryMessage, SessionId, Turn,
};
use tether_store::{ListCursor, TurnPlace};
use tokio::sync::broadcast;

use crate::RuntimeError;
use crate::conversations::Conversations;
use crate::error::Result;

/// A page of the conversation list and the cursor of the next page (`None`: the last).
#[derive(Debug, Clone)]
pub struct ConversationPage {
    pub conversations: Vec<Conversation>,
    pub next_cursor: Option<String>,
}

/// `<updated_at_ms>.<id>` → the cursor; the format is ours, clients pass it back as is.
fn parse_cursor(text: &str) -> Result<ListCursor> {
    let bad = || RuntimeError::BadRequest(format!("cursor {text:?} is not a cursor from a page"));
    let (at, id) = text.split_once('.').ok_or_else(bad)?;
    let updated_at_ms = at.parse::<i64>().map_err(|_| bad())?;
    if id.is_empty() {
        return Err(bad());
    }
    Ok(ListCursor {
        updated_at_ms,
        id: ConversationId::from(id),
    })
}

fn cursor_of(c: &Conversation) -> String {
    format!("{}.{}", c.updated_at_ms, c.id)
}

/// A page of a session's turns, oldest first, and the cursor of the next page (`None`:
/// the last).
#[derive(Debug, Clone)]
pub struct TurnPage {
    pub turns: Vec<Turn>,
    pub next_cursor: Option<String>,
}

/// `<created_at_ms>.<row>` → where a page of turns starts.
fn parse_turn_cursor(text: &str) -> Result<TurnPlace> {
    let bad = || RuntimeError::BadRequest(format!("cursor {text:?} is not a cursor from a page"));
    let (at, row) = text.split_once('.').ok_or_else(bad)?;
    Ok(TurnPlace {
        created_at_ms: at.parse().map_err(|_| bad())?,
        row: row.parse().map_err(|_| bad())?,
    })
}

impl crate::Runtime {
    /// One page of a session's turns, oldest first (`cursor`: the previous page's
    /// `next_cursor`).
    pub async fn session_turns(
        &self,
        id: &SessionId,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<TurnPage> {
        self.conversations().session_turns(id, cursor, limit).await
    }
}

impl Conversations<'_> {
    /// One page of conversations, most recently updated first, after `cursor`.
    pub(crate) async fn list_conversations_page(
        &self,
        include_archived: bool,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<ConversationPage> {
        let cursor = cursor.map(parse_cursor).transpose()?;
        let limit = limit.max(1);
        let viewer = self.rt.access().viewer()?;
        let mut rows = self
            .rt
            .ctx()
            .store
            .conversations()
            .list_conversations_page(
                include_archived,
                cursor.as_ref(),
                limit + 1,
                viewer.as_ref(),
            )
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let conversations = self.views(rows).await?;
        let next_cursor = if more {
            conversations.last().map(cursor_of)
        } else {
            None
        };
        Ok(ConversationPage {
            conversations,
            next_cursor,
        })
    }

    /// One page of a session's turns, oldest first, after `cursor`.
    pub(crate) async fn session_turns(
        &self,
        id: &SessionId,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<TurnPage> {
        let after = cursor.map(parse_turn_cursor).transpose()?;
        let limit = limit.clamp(1, 1000);
        self.get_session(id).await?;
        let mut rows = self
            .rt
            .ctx()
            .store
            .conversations()
            .session_turns(id, after, limit + 1)
            .await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = more
            .then(|| {
                rows.last()
                    .map(|(_, p)| format!("{}.{}", p.created_at_ms, p.row))
            })
            .flatten();
        Ok(TurnPage {
            turns: rows.into_iter().map(|(t, _)| t).collect(),
            next_cursor,
        })
    }

    /// The last `limit` events of a conversation before `before_id` (the end when
    /// `None`), oldest first.
    pub(crate) async fn conversation_events_before(
        &self,
        id: &ConversationId,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<ConversationEventPage> {
        self.readable_row(id).await?;
        let limit = limit.clamp(1, 1000);
        let mut events = self
            .rt
            .ctx()
            .store
            .conversations()
            .conversation_events_before(id, before_id, limit + 1)
            .await?;
        let has_more = events.len() > limit as usize;
        if has_more {
            events.remove(0);
        }
        Ok(ConversationEventPage { events, has_more })
    }

    /// The last `limit` history messages before `before_id`, oldest first.
    pub(crate) async fn history_before(
        &self,
        id: &ConversationId,
        before_id: i64,
        limit: u32,
    ) -> Result<Vec<HistoryMessage>> {
        self.readable_row(id).await?;
        let page = self
            .rt
            .ctx()
            .store
            .conversations()
            .history_before(id, before_id, limit.clamp(1, 1000))
            .await?;
        self.rt.attachments().with_attachments(page).await
    }

    /// Ids of conversations whose list view may have changed: their row changed (created,
    /// renamed, archived, unbound, a turn queued) or a commit stored more than streamed
    /// agent output for them (turns, approvals, questions, sessions). At most one id per
    /// commit, so a list follows every conversation without following their events.
    pub(crate) fn conversation_changes(&self) -> broadcast::Receiver<ConversationId> {
        self.rt.ctx().store.conversations().conversation_changes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_junk_is_refused() {
        let c = parse_cursor("1700000000000.abc.def").unwrap();
        assert_eq!(c.updated_at_ms, 1_700_000_000_000);
        assert_eq!(c.id, "abc.def");
        for junk in ["", "abc", "12", "12.", "x.y"] {
            assert!(parse_cursor(junk).is_err(), "{junk}");
        }
        let t = parse_turn_cursor("1700000000000.42").unwrap();
        assert_eq!((t.created_at_ms, t.row), (1_700_000_000_000, 42));
        for junk in ["", "12", "12.", ".4", "x.4", "12.y", "1.2.3"] {
            assert!(parse_turn_cursor(junk).is_err(), "{junk}");
        }
    }
}
