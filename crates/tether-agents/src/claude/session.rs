//! A live Claude session: one prompt at a time (a `user` message; the reader ends the turn
//! at `result`), `control_request interrupt` to cancel, shutdown by closing stdin.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::map;
use super::state::{Shared, Turn, TurnEnd};
use super::wire::{ControlError, Link};
use crate::driver::{AgentError, AgentEvent, AgentSession, Prompt, TurnOutcome};
use crate::ndjson::WRITE_FAILURE_WAIT;
use crate::process::AgentProcess;
use crate::turn::{self, OnDrop, PromptLock};

/// How long `cancel` waits for claude to acknowledge the interrupt.
const INTERRUPT_WAIT: Duration = Duration::from_secs(10);

/// A user message's content: each image as an Anthropic base64 `image` block, then the
/// text (images first, as Anthropic advises).
fn content(prompt: &Prompt) -> Vec<Value> {
    let mut blocks: Vec<Value> = prompt
        .images
        .iter()
        .map(|i| {
            json!({"type": "image", "source": {
                "type": "base64", "media_type": i.mime, "data": i.data_base64,
            }})
        })
        .collect();
    blocks.push(json!({"type": "text", "text": prompt.text}));
    blocks
}

#[derive(Debug)]
pub(crate) struct ClaudeSession {
    pub session_id: String,
    /// Started with `--resume` (a session-id mismatch is then `ResumeUnavailable`).
    pub resumed: bool,
    pub link: Link,
    pub process: AgentProcess,
    pub shared: Arc<Shared>,
    /// Held while a prompt runs.
    pub prompt_lock: PromptLock,
}

impl ClaudeSession {
    fn mismatch_error(&self, other: &str) -> AgentError {
        let message = format!("claude continued as another session ({other})");
        if self.resumed {
            AgentError::ResumeUnavailable {
                external_id: self.session_id.clone(),
                message,
            }
        } else {
            AgentError::Protocol { message }
        }
    }

    /// Ends a process that is not in the session we asked for, without a grace period.
    async fn kill(&self) {
        self.link.close().await;
        self.process.shutdown_with(Duration::ZERO).await;
    }
}

pub(crate) fn control_error(e: ControlError) -> AgentError {
    match e {
        ControlError::Remote(message) => AgentError::Agent { message },
        ControlError::Closed(info) => info.to_error(),
        ControlError::Write(message) => AgentError::Protocol { message },
    }
}

#[async_trait]
impl AgentSession for ClaudeSession {
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
        true
    }

    async fn prompt_with(
        &self,
        prompt: &Prompt,
        events: mpsc::UnboundedSender<AgentEvent>,
    ) -> Result<TurnOutcome, AgentError> {
        let _running = self.prompt_lock.begin()?;
        let (done_tx, mut done) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if let Some(other) = &state.mismatch {
                return Err(self.mismatch_error(other));
            }
            if let Some(info) = &state.closed {
                return Err(info.to_error());
            }
            state.turn = Some(Turn::new(events, done_tx));
        }
        // Forget the turn when the prompt ends, however it ends.
        let _guard = OnDrop(|| self.shared.lock().turn = None);
        let message = json!({
            "type": "user",
            "message": {"role": "user", "content": content(prompt)},
            "parent_tool_use_id": null,
        });
        if let Err(e) = self.link.send(&message).await {
            // Most likely the process died: prefer the reader's report with the stderr tail.
            return match tokio::time::timeout(WRITE_FAILURE_WAIT, &mut done).await {
                Ok(Ok(TurnEnd::Closed(info))) => Err(info.to_error()),
                _ => Err(control_error(e)),
            };
        }
        let end = done.await.map_err(|_| AgentError::Protocol {
            message: "the turn ended without a result".to_owned(),
        })?;
        let (text, interrupted) = match self.shared.lock().turn.take() {
            Some(turn) => (turn.text, turn.interrupted),
            None => (String::new(), false),
        };
        match end {
            TurnEnd::Result(result) => map::outcome(&result, text, interrupted),
            TurnEnd::Mismatch(other) => {
                self.shared.cancels.cancel_all();
                self.kill().await;
                Err(self.mismatch_error(&other))
            }
            TurnEnd::Closed(info) => Err(info.to_error()),
        }
    }

    async fn cancel(&self) -> Result<(), AgentError> {
        match self.shared.lock().turn.as_mut() {
            Some(turn) => turn.interrupted = true,
            None => return Ok(()),
        }
        let acked = tokio::time::timeout(
            INTERRUPT_WAIT,
            self.link.request(json!({"subtype": "interrupt"})),
        )
        .await;
        // Then answer what still waits for a person "cancelled".
        self.shared.cancels.cancel_all();
        match acked {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(control_error(e)),
            Err(_) => Err(AgentError::Timeout {
                what: "interrupt".to_owned(),
                secs: INTERRUPT_WAIT.as_secs(),
                stderr_tail: self.process.stderr_tail().snapshot(),
            }),
        }
    }

    fn is_alive(&self) -> bool {
        self.process.is_alive()
    }

    fn process(&self) -> crate::driver::ProcessRef {
        crate::driver::ProcessRef {
            shared: None,
            pid: self.process.pid(),
        }
    }

    async fn shutdown(&self) {
        turn::shutdown(&self.shared.cancels, self.link.close(), &self.process).await;
    }
}
