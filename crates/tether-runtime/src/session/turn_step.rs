//! Small pieces the session actor selects on: the in-flight step of a turn, the agent's
//! event stream and a deadline, each optional.

use tether_agents::{AgentError, AgentSession, TurnOutcome};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the in-flight task of a turn produced.
pub(crate) enum Step {
    /// The agent process was started (or resumed).
    Started(Result<Box<dyn AgentSession>, AgentError>),
    /// The prompt ended.
    Prompted(Result<TurnOutcome, AgentError>),
    /// The task panicked or was aborted.
    Aborted(String),
}

/// Awaits the task if there is one; pends forever otherwise.
pub(crate) async fn join_opt(task: &mut Option<JoinHandle<Step>>) -> Step {
    match task {
        Some(t) => match t.await {
            Ok(step) => step,
            Err(e) => Step::Aborted(e.to_string()),
        },
        None => std::future::pending().await,
    }
}

/// Receives from the channel if there is one; pends forever otherwise.
pub(crate) async fn recv_opt<T>(rx: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until the deadline if there is one; pends forever otherwise.
pub(crate) async fn deadline_sleep<K: Copy>(deadline: Option<(Instant, K)>) -> K {
    match deadline {
        Some((at, kind)) => {
            tokio::time::sleep_until(at).await;
            kind
        }
        None => std::future::pending().await,
    }
}
