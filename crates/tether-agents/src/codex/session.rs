//! A live Codex thread: one turn at a time (`turn/start`, then notifications until
//! `turn/completed`), `turn/interrupt`, shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::items::str_field;
use super::state::{Phase, Shared, Turn, spawn_interrupt};
use crate::driver::{AgentError, AgentEvent, AgentSession, Prompt, StopReason, TurnOutcome};
use crate::host::Attached;
use crate::jsonrpc::{Connection, RpcError};
use crate::turn::{OnDrop, PromptLock};

#[derive(Debug)]
pub(crate) struct CodexSession {
    pub thread_id: String,
    pub conn: Connection,
    /// Its own `codex app-server`, or a thread on a shared one.
    pub process: Attached,
    pub shared: Arc<Shared>,
    /// Held while a prompt runs.
    pub prompt_lock: PromptLock,
    /// A turn was started and the agent has not ended it (stays set when the prompt is
    /// given up on).
    pub unfinished: AtomicBool,
}

/// `turn/start`'s input: the text, then each image as a `data:` URL image item (Codex
/// sends it to the model as a Responses `input_image`).
fn input_items(prompt: &Prompt) -> Vec<Value> {
    let mut items = vec![json!({"type": "text", "text": prompt.text, "text_elements": []})];
    items.extend(
        prompt
            .images
            .iter()
            .map(|i| json!({"type": "image", "url": i.data_url()})),
    );
    items
}

/// The outcome of a `turn/completed` turn object. `full_until`: the reset of a window
/// the vendor reported full during the turn (Codex says the reset of a usage limit only
/// there and in a localised message).
fn outcome(
    turn: &Value,
    text: String,
    usage: Option<Value>,
    error: Option<String>,
    full_until: Option<i64>,
) -> Result<TurnOutcome, AgentError> {
    let status = turn.get("status").and_then(Value::as_str).unwrap_or("");
    let stop_reason = match status {
        "completed" => StopReason::EndTurn,
        "interrupted" => StopReason::Cancelled,
        "failed" => {
            let message = turn
                .get("error")
                .and_then(|e| str_field(e, "message"))
                .or(error)
                .unwrap_or_else(|| "the turn failed".to_owned());
            // Codex says which limit in `codexErrorInfo`; the reset time only in its
            // (localised) message, which is not parsed, and in a rate-limit snapshot.
            let info = turn
                .pointer("/error/codexErrorInfo")
                .and_then(Value::as_str);
            if matches!(info, Some("usageLimitExceeded")) {
                return Err(AgentError::UsageLimit {
                    message,
                    resets_at_ms: full_until,
                });
            }
            return Err(AgentError::Agent { message });
        }
        other => {
            return Err(AgentError::Protocol {
                message: format!("turn/completed with status {other:?}"),
            });
        }
    };
    Ok(TurnOutcome {
        stop_reason,
        text,
        usage,
    })
}

#[async_trait]
impl AgentSession for CodexSession {
    fn external_id(&self) -> String {
        self.thread_id.clone()
    }

    async fn prompt(
        &self,
        text: &str,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError> {
        self.prompt_with(&Prompt::text(text), events).await
    }

    fn accepts_images(&self) -> bool {
        true
    }

    async fn prompt_with(
        &self,
        prompt: &Prompt,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError> {
        let _running = self.prompt_lock.begin()?;
        if let Some(info) = self.conn.closed() {
            return Err(info.to_error());
        }
        let (end_tx, end_rx) = oneshot::channel();
        self.shared.lock().phase = Phase::Turn(Box::new(Turn::new(events, end_tx)));
        // Back to idle when the prompt ends, however it ends.
        let _guard = OnDrop(|| self.shared.lock().phase.leave_turn());
        let params = json!({
            "threadId": self.thread_id,
            "input": input_items(prompt),
        });
        self.unfinished.store(true, Ordering::SeqCst);
        let started = self.conn.request("turn/start", params).await.map_err(|e| {
            // Refused: no turn runs.
            self.unfinished.store(false, Ordering::SeqCst);
            e.into_agent_error()
        })?;
        if let Some(id) = started.get("turn").and_then(|t| str_field(t, "id")) {
            let mut state = self.shared.lock();
            if let Phase::Turn(turn) = &mut state.phase
                && turn.turn_id.is_none()
            {
                turn.turn_id = Some(id.clone());
                if turn.cancel_requested {
                    spawn_interrupt(&self.conn, self.thread_id.clone(), id);
                }
            }
        }
        let end = end_rx.await;
        self.unfinished.store(false, Ordering::SeqCst);
        let end = match end {
            Ok(end) => end,
            // The sender went away without an answer: only when the phase was replaced.
            Err(_) => {
                return Err(match self.conn.closed() {
                    Some(info) => info.to_error(),
                    None => AgentError::Protocol {
                        message: "the turn ended without turn/completed".to_owned(),
                    },
                });
            }
        };
        let done = end.map_err(|info| info.to_error())?;
        let (text, usage, error, full_until) = match self.shared.lock().phase.take_turn() {
            Some(turn) => (turn.text, turn.usage, turn.error, turn.full_until),
            None => (String::new(), None, None, None),
        };
        outcome(&done, text, usage, error, full_until)
    }

    async fn cancel(&self) -> Result<(), AgentError> {
        let turn_id = {
            let mut state = self.shared.lock();
            let Phase::Turn(turn) = &mut state.phase else {
                return Ok(());
            };
            turn.cancel_requested = true;
            turn.turn_id.clone()
        };
        // Pending approvals and questions answer "cancel" (which also interrupts in Codex).
        self.shared.cancels.cancel_all();
        let Some(turn_id) = turn_id else {
            // Interrupted as soon as the turn id is known.
            return Ok(());
        };
        let params = json!({"threadId": self.thread_id, "turnId": turn_id});
        match self.conn.request("turn/interrupt", params).await {
            Ok(_) => Ok(()),
            // Most likely the turn ended in the meantime.
            Err(RpcError::Remote { message, .. }) => {
                tracing::debug!("turn/interrupt refused: {message}");
                Ok(())
            }
            Err(e) => Err(self.conn.failure(e)),
        }
    }

    fn is_alive(&self) -> bool {
        self.process.is_alive()
    }

    fn process(&self) -> crate::driver::ProcessRef {
        self.process.process_ref()
    }

    /// Codex keeps an unsubscribed thread loaded, with its MCP servers, while its
    /// process runs (not one whose prompt it never ended: that process is retired).
    fn parked(&self) -> Option<crate::host::Parked> {
        match &self.process {
            Attached::Shared(lease)
                if lease.is_alive() && !self.unfinished.load(Ordering::SeqCst) =>
            {
                Some(lease.parked())
            }
            _ => None,
        }
    }

    async fn shutdown(&self) {
        // On a shared process the thread is unsubscribed (codex keeps it loaded); the
        // process goes on.
        let detach = async {
            let params = json!({"threadId": self.thread_id});
            if let Err(e) = self.conn.request("thread/unsubscribe", params).await {
                tracing::debug!("thread/unsubscribe: {}", e.into_agent_error());
            }
        };
        let unfinished = self.unfinished.load(Ordering::SeqCst);
        self.process
            .end(&self.shared.cancels, self.conn.close(), detach, unfinished)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_statuses() {
        let ok = outcome(
            &json!({"status": "completed"}),
            "hi".into(),
            None,
            None,
            None,
        );
        assert_eq!(ok.map(|o| o.stop_reason).ok(), Some(StopReason::EndTurn));
        let cancelled = outcome(
            &json!({"status": "interrupted"}),
            String::new(),
            None,
            None,
            None,
        );
        assert_eq!(
            cancelled.map(|o| o.stop_reason).ok(),
            Some(StopReason::Cancelled)
        );
        let failed = outcome(
            &json!({"status": "failed", "error": {"message": "boom"}}),
            String::new(),
            None,
            None,
            None,
        );
        assert!(matches!(failed, Err(AgentError::Agent { message }) if message == "boom"));
        let fallback = outcome(
            &json!({"status": "failed", "error": null}),
            String::new(),
            None,
            Some("late".into()),
            None,
        );
        assert!(matches!(fallback, Err(AgentError::Agent { message }) if message == "late"));
    }
}
