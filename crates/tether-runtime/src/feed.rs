//! The one way to read events live: [`Runtime::follow`] (architecture.md §5). The feed
//! itself is the store's (`tether_store::Store::follow`): events are published there at
//! commit, in commit order, to the followers of their conversation.

use tether_store::{Follower, Scope};

use crate::error::Result;
use crate::{Runtime, RuntimeError};

impl Runtime {
    /// Follows a conversation's or a session's events after event id `after_id` (0: from
    /// the beginning): first what the store holds after it, then each commit as it
    /// happens, in commit order, never a gap or a duplicate. Event ids are the resume
    /// point (the SSE `id`); they increase in commit order within a conversation.
    /// An unknown conversation or session is `not_found`.
    pub async fn follow(&self, scope: Scope, after_id: i64) -> Result<Follower> {
        self.check_scope(&scope).await?;
        Ok(self.ctx().store.follow(scope, after_id).await?)
    }

    /// Follows from now on: what committed before the call is not delivered.
    pub async fn follow_from_now(&self, scope: Scope) -> Result<Follower> {
        self.check_scope(&scope).await?;
        Ok(self.ctx().store.follow_from_now(scope).await?)
    }

    async fn check_scope(&self, scope: &Scope) -> Result<()> {
        let store = &self.ctx().store;
        let (what, id, found) = match scope {
            Scope::Conversation(id) => (
                "conversation",
                id.as_str(),
                store.get_conversation(id).await?.is_some(),
            ),
            Scope::Session(id) => (
                "session",
                id.as_str(),
                store.get_session(id).await?.is_some(),
            ),
        };
        if found {
            Ok(())
        } else {
            Err(RuntimeError::NotFound {
                what,
                id: id.to_string(),
            })
        }
    }

    /// Conversations with at least one follower (`GET /api/v1/runtime`).
    pub fn followed_conversations(&self) -> usize {
        self.ctx().store.followed_conversations()
    }

    /// Other nodes' events handed to this node's followers, and the commit notices
    /// received (`GET /api/v1/runtime`; see `tether_store::TailStats`).
    pub fn tail_figures(&self) -> (u64, u64) {
        let t = self.ctx().store.tail_stats();
        (t.events_tailed, t.notices_received)
    }

    /// Group commits of streamed batches so far (`GET /api/v1/runtime`).
    pub fn event_commits(&self) -> u64 {
        self.ctx().store.append_stats().commits
    }
}
