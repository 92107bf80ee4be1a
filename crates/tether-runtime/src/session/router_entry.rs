//! Where a message enters the router: the [`Router`] service (reached through
//! `Runtime::router()`), its routing locks and session actors (its state is
//! `router_state.rs`), and `send_here`, a message under its conversation's lock. The
//! binding rules themselves are `router.rs`.

use tether_proto::{ConversationId, MessageOutcome, SendMessage, SessionId, TurnId};

use crate::error::Result;
use crate::session::actors::To;
use crate::session::handle::SessionActor;
use crate::session::mailbox::ActorHandle;
use crate::session::router_state::RouterState;
use crate::session::routing::{RoutingLock, RoutingScope};

/// The router: applies the binding rules to a message under its conversation's routing
/// lock and hands the work to the session's actor. A view of the runtime (cheap, `Copy`).
#[derive(Clone, Copy)]
pub(crate) struct Router<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Router<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Router { rt }
    }

    fn state(self) -> &'a RouterState {
        &self.rt.inner.router
    }

    /// The typed handle of a session's actor (spawned for `To::Session` if none runs).
    pub(crate) fn actor(self, to: To<'a>) -> SessionActor<'a> {
        SessionActor::new(&self.state().actors, &self.rt.inner.ctx, to)
    }

    /// Session actors running now.
    pub(crate) fn actors_running(self) -> usize {
        self.state().actors.count()
    }

    /// Routing locks currently held or waited for.
    pub(crate) fn locks_held(self) -> usize {
        self.state().locks.len()
    }

    /// Closes every actor's mailbox; their handles, to wait for their shutdown.
    pub(crate) fn close_actors(self) -> Vec<ActorHandle> {
        self.state().actors.close()
    }
}

impl Router<'_> {
    pub(crate) async fn lock_conversation(&self, id: &ConversationId) -> RoutingLock {
        self.state()
            .locks
            .lock(RoutingScope::Conversation(id.clone()))
            .await
    }

    /// The lock of a parent conversation's delegations (see [`RoutingScope::Delegations`]).
    pub(crate) async fn lock_delegations_of(&self, parent: &ConversationId) -> RoutingLock {
        self.state()
            .locks
            .lock(RoutingScope::Delegations(parent.clone()))
            .await
    }

    /// The routing lock of an existing conversation and its row as read under it (an
    /// unknown id is `not_found`; its lock entry goes with the guard).
    pub(crate) async fn lock_existing(
        &self,
        id: &ConversationId,
    ) -> Result<(RoutingLock, tether_store::ConversationRow)> {
        let guard = self.lock_conversation(id).await;
        let row = self.rt.conversations().conversation_row(id).await?;
        Ok((guard, row))
    }

    /// The actor of a session if one is running.
    pub(crate) fn existing_actor(&self, session_id: &SessionId) -> Option<ActorHandle> {
        self.state().actors.running(session_id)
    }

    /// A message, under the conversation's routing lock. With `turn_id` (a message that
    /// may be delivered again), a prompt whose turn is stored already is not routed again
    /// (outcome `started`, no reply). Whether `who` may write to the conversation is
    /// decided here, on the row read under the lock (`Access::check_call` leaves it to
    /// this one read).
    pub(crate) async fn send_here(
        &self,
        id: &ConversationId,
        req: SendMessage,
        by: &str,
        turn_id: Option<&TurnId>,
        who: Option<&crate::Identity>,
    ) -> Result<MessageOutcome> {
        let _guard = self.lock_conversation(id).await;
        let target = self.rt.conversations().conversation_for_message(id).await?;
        if let Some(who) = who {
            self.rt.access().decide_row(
                who,
                tether_core::authz::Action::Write,
                &target.conversation,
            )?;
        }
        if let Some(turn_id) = turn_id
            && let Some(t) = self
                .rt
                .ctx()
                .store
                .conversations()
                .get_turn(turn_id)
                .await?
        {
            return Ok(MessageOutcome {
                outcome: tether_proto::MessageOutcomeKind::Started,
                turn_id: Some(t.id),
                session_id: Some(t.session_id),
                new_session: None,
                queue_position: None,
                reply: None,
                attachments: Vec::new(),
            });
        }
        self.route_message(target, req, by, turn_id).await
    }
}
