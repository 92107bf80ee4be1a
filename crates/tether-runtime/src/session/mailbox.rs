//! A session actor's mailbox as its senders hold it, and the one time-out policy of every
//! command: wait at most [`ACTOR_REPLY_TIMEOUT`] for room in a full mailbox, and at most
//! [`ActorCmd::reply_bound`] for the reply ([`reply_within`]).

use std::time::Duration;

use tokio::sync::mpsc::error::{SendError, TrySendError};
use tokio::sync::{mpsc, oneshot};

use crate::RuntimeError;
use crate::session::command::{ACTOR_REPLY_TIMEOUT, ActorCmd, Delivery};

/// Handle to a running actor's mailbox.
#[derive(Clone)]
pub(crate) struct ActorHandle {
    pub tx: mpsc::Sender<ActorCmd>,
}

/// Why a command did not reach an actor.
pub(crate) enum Undelivered {
    /// The actor has ended (or is ending): the command comes back.
    Gone(ActorCmd),
    /// The mailbox stayed full for [`ACTOR_REPLY_TIMEOUT`]; the command is dropped.
    Busy,
}

impl ActorHandle {
    /// Sends `cmd`, waiting (bounded) for room. Never call it from the actor itself.
    pub async fn send(&self, cmd: ActorCmd) -> Result<(), Undelivered> {
        match tokio::time::timeout(ACTOR_REPLY_TIMEOUT, self.tx.send(cmd)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(SendError(cmd))) => Err(Undelivered::Gone(cmd)),
            Err(_) => Err(Undelivered::Busy),
        }
    }

    /// Sends without waiting; a full mailbox gets the command from a task that waits for
    /// room. For senders that hold a lock and must not await (the live pool).
    pub fn send_now(&self, cmd: ActorCmd) {
        match self.tx.try_send(cmd) {
            Ok(()) | Err(TrySendError::Closed(_)) => {}
            Err(TrySendError::Full(cmd)) => {
                let h = self.clone();
                tokio::spawn(async move {
                    if let Err(Undelivered::Busy) = h.send(cmd).await {
                        tracing::warn!("a session actor's mailbox stayed full; command dropped");
                    }
                });
            }
        }
    }

    /// Passes a resolved approval or question to the agent (the store has the outcome
    /// already: an actor that is gone had nothing waiting for it).
    pub async fn deliver(&self, delivery: Delivery) {
        let _ = self.send(ActorCmd::Deliver(delivery)).await;
    }

    /// Daemon shutdown: the actor ends its agent process; returns once it did (or its
    /// time is up).
    pub async fn shutdown(&self) -> Result<(), RuntimeError> {
        let (done, rx) = oneshot::channel();
        let cmd = ActorCmd::Shutdown { done };
        // Shutdown starts no agent: the start time-out plays no part in its bound.
        let bound = cmd.reply_bound(Duration::ZERO);
        match self.send(cmd).await {
            Ok(()) => reply_within(bound, rx).await,
            // Already ended: nothing left to shut down.
            Err(Undelivered::Gone(_)) => Ok(()),
            Err(Undelivered::Busy) => Err(busy()),
        }
    }
}

/// Waits for an actor's reply, at most `bound`: the one place a sender waits for one.
pub(crate) async fn reply_within<T>(
    bound: Duration,
    rx: oneshot::Receiver<T>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(bound, rx).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(RuntimeError::Internal(
            "the session actor is gone".to_string(),
        )),
        Err(_) => Err(RuntimeError::Internal(
            "the session actor did not answer".to_string(),
        )),
    }
}

pub(crate) fn busy() -> RuntimeError {
    RuntimeError::Internal("the session actor's mailbox stayed full".to_string())
}
