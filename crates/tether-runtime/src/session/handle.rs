//! The typed handle of a session's actor, as the rest of the runtime calls it: one method
//! per command, each reply waited for under the one time-out policy of `mailbox`
//! (through [`Actors::request`]). Nothing outside `session/` builds a command or a reply
//! channel.

use std::sync::Arc;

use tether_proto::{ErrorCode, TurnId};

use crate::ctx::Ctx;
use crate::error::Result;
use crate::session::actors::{Actors, To};
use crate::session::command::{ActorCmd, Delivery, Enqueued, RunIfIdle};
use tether_store::NewTurn;

/// A session's actor: `To::Session` spawns it if none runs; `To::Running` reaches it
/// only if it runs (`None` / `false` otherwise: an absent actor has nothing to act on).
pub(crate) struct SessionActor<'a> {
    actors: &'a Arc<Actors>,
    ctx: &'a Arc<Ctx>,
    to: To<'a>,
}

impl<'a> SessionActor<'a> {
    pub fn new(actors: &'a Arc<Actors>, ctx: &'a Arc<Ctx>, to: To<'a>) -> SessionActor<'a> {
        SessionActor { actors, ctx, to }
    }

    /// Runs a stored, `queued` turn now or after the running one.
    pub async fn enqueue(&self, turn_id: &TurnId, input: &str) -> Result<Option<Enqueued>> {
        self.actors
            .request(self.ctx, self.to, |reply| ActorCmd::Enqueue {
                turn_id: turn_id.clone(),
                input: input.to_string(),
                trace: Some(tracing_opentelemetry::OpenTelemetrySpanExt::context(
                    &tracing::Span::current(),
                )),
                reply,
            })
            .await
    }

    /// Stores `turn` (a message's, with its input in the history) already running and
    /// runs it, if the session is idle; `Busy` stores nothing.
    pub async fn run_if_idle(&self, turn: &NewTurn) -> Result<Option<RunIfIdle>> {
        self.actors
            .request(self.ctx, self.to, |reply| ActorCmd::RunIfIdle {
                turn: turn.clone(),
                trace: Some(tracing_opentelemetry::OpenTelemetrySpanExt::context(
                    &tracing::Span::current(),
                )),
                reply,
            })
            .await
    }

    /// Cancels the running turn; `Some(true)` when one was running.
    pub async fn stop(&self) -> Result<Option<bool>> {
        self.actors
            .request(self.ctx, self.to, |reply| ActorCmd::Stop {
                reply: Some(reply),
            })
            .await
    }

    /// Makes the session live (strict resume) without running a turn; the inner error is
    /// the driver's code and message.
    pub async fn ensure_live(
        &self,
    ) -> Result<Option<std::result::Result<(), (ErrorCode, String)>>> {
        self.actors
            .request(self.ctx, self.to, |reply| ActorCmd::EnsureLive { reply })
            .await
    }

    /// Releases the session: stops a running turn, ends the process and the actor;
    /// returns once done.
    pub async fn close(&self) -> Result<Option<()>> {
        self.actors
            .request(self.ctx, self.to, |reply| ActorCmd::Close { reply })
            .await
    }

    /// Passes a resolved approval or question to the agent.
    pub async fn deliver(&self, delivery: Delivery) -> Result<bool> {
        self.tell(ActorCmd::Deliver(delivery)).await
    }

    /// The session is no longer bound: its process ends once its queue is empty.
    pub async fn park(&self) -> Result<bool> {
        self.tell(ActorCmd::Park).await
    }

    /// A command with no reply (bounded wait for room only).
    async fn tell(&self, cmd: ActorCmd) -> Result<bool> {
        self.actors.send(self.ctx, self.to, cmd).await
    }
}
