//! Handing a message's turn to its session's actor (a part of the router): run at once by
//! an idle actor, which stores it already running (`RunIfIdle`, one commit), else stored
//! `queued` and enqueued; a turn that cannot be handed over is failed, never left open.

use tether_proto::{ConversationId, TurnId};
use tether_store::NewTurn;

use crate::RuntimeError;
use crate::error::Result;
use crate::session::actors::To;
use crate::session::command::{Enqueued, RunIfIdle};
use crate::session::ending::TurnEnding;
use crate::session::router_entry::Router;

impl Router<'_> {
    /// Stores a message's turn and runs it: an idle session's actor stores it already
    /// running (one commit for the message and the start); else it is stored queued and
    /// handed to the actor. Never leaves an accepted message as a turn that will not run.
    pub(crate) async fn run_or_enqueue(
        &self,
        session: &tether_proto::Session,
        owner: &ConversationId,
        turn: &NewTurn,
    ) -> Result<Enqueued> {
        let store = &self.rt.ctx().store;
        let to = To::Session { session, owner };
        match self.actor(to).run_if_idle(turn).await {
            Ok(Some(RunIfIdle::Started)) => return Ok(Enqueued::Started),
            Ok(Some(RunIfIdle::Failed(e))) => return Err(e.into()),
            Ok(Some(RunIfIdle::Busy)) => {}
            Ok(None) => {
                return Err(RuntimeError::Internal(
                    "the session actor is gone".to_string(),
                ));
            }
            Err(e) => {
                // No answer in time: the actor may still take the command (it skips it
                // once it sees nobody waits, but may have begun). The turn's id decides:
                // stored here, then failed (never run); or stored by the actor first,
                // then it runs, and the message was accepted.
                return match store.conversations().insert_turn(turn, true).await {
                    Ok(_) => {
                        self.fail_unstarted(&turn.id, &e).await;
                        Err(e)
                    }
                    Err(_) => match store.conversations().get_turn(&turn.id).await? {
                        Some(t) if t.status != tether_proto::TurnStatus::Queued => {
                            Ok(Enqueued::Started)
                        }
                        _ => Err(e),
                    },
                };
            }
        }
        store.conversations().insert_turn(turn, true).await?;
        match self.enqueue(session, owner, turn).await {
            Ok(e) => Ok(e),
            Err(e) => {
                self.fail_unstarted(&turn.id, &e).await;
                Err(e)
            }
        }
    }

    /// Hands a stored turn to its session's actor.
    async fn enqueue(
        &self,
        session: &tether_proto::Session,
        owner: &ConversationId,
        turn: &NewTurn,
    ) -> Result<Enqueued> {
        let to = To::Session { session, owner };
        let enqueued = self.actor(to).enqueue(&turn.id, &turn.input).await?;
        enqueued.ok_or_else(|| RuntimeError::Internal("the session actor is gone".to_string()))
    }

    /// Fails a stored turn that could not be handed to its actor.
    pub(crate) async fn fail_unstarted(&self, turn_id: &TurnId, err: &RuntimeError) {
        let ending = TurnEnding::not_run(err.code(), err.to_string());
        if let Err(e) = ending.record(self.rt.ctx(), turn_id, &[]).await {
            tracing::error!(error = %e, "cannot fail an unstarted turn");
        }
    }
}
