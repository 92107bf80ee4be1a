//! Session mechanics the drivers share: one prompt at a time ([`PromptLock`]), what the
//! reader task is doing ([`Phase`]) and the state both sides share ([`Shared`]), undoing
//! a turn however a prompt ends ([`OnDrop`]), answering whatever waits for a person
//! "cancelled" ([`Cancels`]), and the order of a shutdown ([`shutdown`]).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::{MutexGuard, oneshot, watch};

use crate::driver::AgentError;
use crate::process::AgentProcess;

/// Held while a prompt runs; a second prompt in the same session is refused.
#[derive(Debug, Default)]
pub(crate) struct PromptLock(tokio::sync::Mutex<()>);

impl PromptLock {
    pub fn begin(&self) -> Result<MutexGuard<'_, ()>, AgentError> {
        self.0.try_lock().map_err(|_| AgentError::Protocol {
            message: "a prompt is already running in this session".to_owned(),
        })
    }
}

/// What a session is doing, as far as incoming updates are concerned.
#[derive(Debug)]
pub(crate) enum Phase<T> {
    /// Updates are dropped: before the session exists (and, in ACP, while `session/load`
    /// replays history).
    Quiet,
    Idle,
    Turn(T),
}

impl<T> Phase<T> {
    pub fn is_turn(&self) -> bool {
        matches!(self, Phase::Turn(_))
    }

    /// Back to idle; the turn that ran, if one did.
    pub fn take_turn(&mut self) -> Option<T> {
        match std::mem::replace(self, Phase::Idle) {
            Phase::Turn(turn) => Some(turn),
            _ => None,
        }
    }

    /// Back to idle if a turn runs (else unchanged).
    pub fn leave_turn(&mut self) {
        if self.is_turn() {
            *self = Phase::Idle;
        }
    }
}

/// A driver's session state `S`, shared between the session handle and the reader task's
/// handler, plus the session's [`Cancels`] (fired by cancel and shutdown: pending
/// permission requests and questions are then answered as cancelled).
#[derive(Debug)]
pub(crate) struct Shared<S> {
    state: Mutex<S>,
    pub cancels: Cancels,
}

impl<S> Shared<S> {
    pub fn with_state(state: S) -> Arc<Self> {
        Arc::new(Shared {
            state: Mutex::new(state),
            cancels: Cancels::default(),
        })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs its closure when dropped: puts a session's state back when a prompt ends, however
/// it ends (an error, or the caller dropping the prompt future).
pub(crate) struct OnDrop<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Cancels every pending permission request and question of a session at once (on cancel
/// and shutdown): each waits through a [`CancelWatch`] taken when it arrived.
#[derive(Debug)]
pub(crate) struct Cancels(watch::Sender<u64>);

impl Default for Cancels {
    fn default() -> Self {
        Cancels(watch::channel(0).0)
    }
}

impl Cancels {
    pub fn cancel_all(&self) {
        self.0.send_modify(|g| *g += 1);
    }

    /// Notices every [`Cancels::cancel_all`] from now on.
    pub fn watch(&self) -> CancelWatch {
        CancelWatch(self.0.subscribe())
    }
}

/// See [`Cancels`].
#[derive(Debug)]
pub(crate) struct CancelWatch(watch::Receiver<u64>);

impl CancelWatch {
    /// Returns at the next cancel (or when the session is gone).
    pub async fn cancelled(&mut self) {
        let _ = self.0.changed().await;
    }

    /// The answer; `None` if it was dropped or everything was cancelled first.
    pub async fn answer<T>(&mut self, answer: oneshot::Receiver<T>) -> Option<T> {
        tokio::select! {
            answer = answer => answer.ok(),
            () = self.cancelled() => None,
        }
    }
}

/// Ends a session: cancels what waits for a person, closes the agent's stdin (`close`),
/// then stops the process gracefully (see [`AgentProcess::shutdown`]).
pub(crate) async fn shutdown(
    cancels: &Cancels,
    close: impl Future<Output = ()>,
    process: &AgentProcess,
) {
    cancels.cancel_all();
    close.await;
    process.shutdown().await;
}
