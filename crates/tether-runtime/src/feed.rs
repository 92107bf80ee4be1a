//! The one way to read events live: [`Runtime::follow`] (architecture.md §5). The feed
//! itself is the store's (`tether_store::Events::follow`): events are published there at
//! commit, in commit order, to the followers of their conversation.

use tether_store::{Follower, Scope};

use crate::RuntimeError;
use crate::error::Result;

/// The feed service: follows events live. A view of the runtime (cheap, `Copy`), reached
/// through `Runtime::feed()`.
#[derive(Clone, Copy)]
pub(crate) struct Feed<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Feed<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Feed { rt }
    }
}

impl Feed<'_> {
    /// Follows a conversation's or a session's events after event id `after_id` (0: from
    /// the beginning): first what the store holds after it, then each commit as it
    /// happens, in commit order, never a gap or a duplicate. Event ids are the resume
    /// point (the SSE `id`); they increase in commit order within a conversation.
    /// An unknown conversation or session is `not_found`.
    pub(crate) async fn follow(&self, scope: Scope, after_id: i64) -> Result<Follower> {
        self.check_scope(&scope).await?;
        Ok(self.rt.ctx().store.events().follow(scope, after_id).await?)
    }

    /// Follows from now on: what committed before the call is not delivered.
    pub(crate) async fn follow_from_now(&self, scope: Scope) -> Result<Follower> {
        self.check_scope(&scope).await?;
        Ok(self.rt.ctx().store.events().follow_from_now(scope).await?)
    }

    async fn check_scope(&self, scope: &Scope) -> Result<()> {
        self.rt.access().follow(scope).await?;
        let store = &self.rt.ctx().store;
        let (what, id, found) = match scope {
            Scope::Conversation(id) => (
                "conversation",
                id.as_str(),
                store.conversations().get_conversation(id).await?.is_some(),
            ),
            Scope::Session(id) => (
                "session",
                id.as_str(),
                store.conversations().get_session(id).await?.is_some(),
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
    pub(crate) fn followed_conversations(&self) -> usize {
        self.rt.ctx().store.events().followed_conversations()
    }

    /// Other nodes' events handed to this node's followers, and the commit notices
    /// received (`GET /api/v1/runtime`; see `tether_store::TailStats`).
    pub(crate) fn tail_figures(&self) -> (u64, u64) {
        let t = self.rt.ctx().store.tail_stats();
        (t.events_tailed, t.notices_received)
    }

    /// Group commits of streamed batches so far (`GET /api/v1/runtime`).
    pub(crate) fn event_commits(&self) -> u64 {
        self.rt.ctx().store.append_stats().commits
    }
}
