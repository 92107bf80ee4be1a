//! A live ACP session: one prompt at a time (`session/prompt`, streaming through the
//! reader task's [`Shared`] state), `session/cancel`, shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use super::state::{Phase, Shared, Turn};
use super::wire;
use crate::driver::{AgentError, AgentEvent, AgentSession, Prompt, TurnOutcome};
use crate::host::Attached;
use crate::jsonrpc::Connection;
use crate::turn::{OnDrop, PromptLock};

#[derive(Debug)]
pub(crate) struct AcpSession {
    pub session_id: String,
    /// The agent takes image content blocks (`promptCapabilities.image`).
    pub images: bool,
    pub conn: Connection,
    /// The shared agent offers `session/close` (sent when the session leaves it).
    pub closable: bool,
    /// Its own agent process, or a session on a shared one.
    pub process: Attached,
    pub shared: Arc<Shared>,
    /// Held while a prompt runs.
    pub prompt_lock: PromptLock,
    /// A prompt was sent and the agent has not answered it (stays set when the prompt is
    /// given up on).
    pub unfinished: AtomicBool,
}

impl AcpSession {
    fn resume_error(&self, other: &str) -> AgentError {
        AgentError::ResumeUnavailable {
            external_id: self.session_id.clone(),
            message: format!("the agent continued as another session ({other})"),
        }
    }
}

#[async_trait]
impl AgentSession for AcpSession {
    fn external_id(&self) -> String {
        self.session_id.clone()
    }

    async fn prompt(
        &self,
        text: &str,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError> {
        self.prompt_with(&Prompt::text(text), events).await
    }

    fn accepts_images(&self) -> bool {
        self.images
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
        let params = wire::prompt(&self.session_id, prompt)?;
        let cancel = wire::cancel(&self.session_id)?;
        let (abort_tx, mut abort_rx) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if let Some(other) = &state.mismatch {
                return Err(self.resume_error(other));
            }
            state.phase = Phase::Turn(Turn {
                events,
                text: String::new(),
                abort: Some(abort_tx),
            });
        }
        // Back to idle when the prompt ends, however it ends.
        let _guard = OnDrop(|| self.shared.lock().phase.leave_turn());
        self.unfinished.store(true, Ordering::SeqCst);
        let reply = tokio::select! {
            biased;
            Ok(other) = &mut abort_rx => {
                // Stop whatever the agent is doing in the other session; never show it.
                let _ = self.conn.notify("session/cancel", cancel).await;
                self.shared.cancels.cancel_all();
                return Err(self.resume_error(&other));
            }
            reply = self.conn.request("session/prompt", params) => reply,
        };
        self.unfinished.store(false, Ordering::SeqCst);
        // The reply may win the race against a mismatch seen in the same moment: strict
        // resume still holds.
        let mismatch = self.shared.lock().mismatch.clone();
        if let Some(other) = mismatch {
            self.shared.cancels.cancel_all();
            return Err(self.resume_error(&other));
        }
        let result = reply.map_err(prompt_error)?;
        let turn = self.shared.lock().phase.take_turn();
        let text = match turn {
            Some(turn) => {
                // The turn's usage, reported once at its end (ACP has no mid-turn count).
                for (tokens, model) in crate::usage::acp_result(&result) {
                    let report = crate::driver::UsageReport {
                        tokens,
                        model,
                        key: None,
                    };
                    let _ = turn.events.send(AgentEvent::Usage(report));
                }
                turn.text
            }
            None => String::new(),
        };
        Ok(TurnOutcome {
            stop_reason: wire::prompt_stop(&result),
            text,
            // Not in the stable schema (`unstable_end_turn_token_usage`): passed on as sent.
            usage: result.get("usage").filter(|u| !u.is_null()).cloned(),
        })
    }

    async fn cancel(&self) -> Result<(), AgentError> {
        if !self.shared.lock().phase.is_turn() {
            return Ok(());
        }
        let sent = self
            .conn
            .notify("session/cancel", wire::cancel(&self.session_id)?)
            .await;
        // Then answer pending permission requests and questions "cancelled" (ACP wants the
        // client to do so after cancelling).
        self.shared.cancels.cancel_all();
        sent.map_err(|e| self.conn.failure(e))
    }

    fn is_alive(&self) -> bool {
        self.process.is_alive()
    }

    fn process(&self) -> crate::driver::ProcessRef {
        self.process.process_ref()
    }

    async fn shutdown(&self) {
        // A hung agent that does not read stdin must not keep the process alive.
        let close = async {
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(2), self.conn.close()).await;
        };
        // On a shared process: a running prompt is cancelled, the session closed where the
        // agent offers it; the process goes on.
        let detach = async {
            if self.shared.lock().phase.is_turn()
                && let Ok(cancel) = wire::cancel(&self.session_id)
            {
                let _ = self.conn.notify("session/cancel", cancel).await;
            }
            if self.closable {
                let params = serde_json::json!({"sessionId": self.session_id});
                if let Err(e) = self.conn.request("session/close", params).await {
                    tracing::debug!("session/close: {}", e.into_agent_error());
                }
            }
        };
        let unfinished = self.unfinished.load(Ordering::SeqCst);
        self.process
            .end(&self.shared.cancels, close, detach, unfinished)
            .await;
    }
}

/// A prompt's error answer: the vendor's limit (Gemini answers 429 with when to retry;
/// see `windows::acp_limit`) is a usage limit, anything else the agent's error.
fn prompt_error(e: crate::jsonrpc::RpcError) -> AgentError {
    if let crate::jsonrpc::RpcError::Remote { code, message, .. } = &e
        && let Some(after) = crate::windows::acp_limit(*code, message)
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        return AgentError::UsageLimit {
            message: message.clone(),
            resets_at_ms: after.map(|ms| now + ms),
        };
    }
    e.into_agent_error()
}
