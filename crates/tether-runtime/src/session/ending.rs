//! How a turn ends: the stored row (status, result, error), the terminal event and the
//! history line, built together in one place so that every path that ends a turn (the
//! actor's outcome, a start that failed, a full queue, a turn no actor took) records the
//! same three things the same way.

use tether_agents::TurnOutcome;
use tether_proto::{ErrorCode, EventPayload, MessageRole, TurnId, TurnStatus};
use tether_store::{FinishedTurn, NewMessage, NewUsage, StoreError, TurnEnd};

use crate::ctx::Ctx;

/// A turn's end, ready to be stored.
pub(crate) struct TurnEnding {
    end: TurnEnd,
    event: EventPayload,
    line: Option<NewMessage>,
    /// The turn's usage row, stored in the same transaction (see [`TurnEnding::record`]).
    usage: Option<NewUsage>,
}

impl TurnEnding {
    /// The agent ended the turn; its final text, or what it streamed when the final
    /// message is empty.
    pub fn completed(outcome: TurnOutcome, streamed: String) -> TurnEnding {
        let text = if outcome.text.is_empty() {
            streamed
        } else {
            outcome.text
        };
        let stop_reason = outcome.stop_reason.as_str().to_string();
        TurnEnding {
            end: TurnEnd {
                status: TurnStatus::Completed,
                result_text: Some(text.clone()),
                stop_reason: Some(stop_reason.clone()),
                error: None,
                usage: outcome.usage,
            },
            event: EventPayload::TurnCompleted {
                stop_reason: Some(stop_reason),
                text: text.clone(),
            },
            line: Some(NewMessage {
                role: MessageRole::Agent,
                text,
            }),
            usage: None,
        }
    }

    /// The turn was cancelled; what it streamed so far is kept as its result.
    pub fn cancelled(streamed: String) -> TurnEnding {
        TurnEnding {
            end: TurnEnd {
                status: TurnStatus::Cancelled,
                result_text: (!streamed.is_empty()).then_some(streamed),
                stop_reason: Some("cancelled".to_string()),
                error: None,
                usage: None,
            },
            event: EventPayload::TurnCancelled {},
            line: Some(NewMessage {
                role: MessageRole::Status,
                text: "turn cancelled".to_string(),
            }),
            usage: None,
        }
    }

    /// The turn ran and failed; what it streamed so far is kept as its result.
    pub fn failed(code: ErrorCode, message: String, streamed: String) -> TurnEnding {
        let line = format!("turn failed ({code}): {message}");
        let mut ending = TurnEnding::failure(code, message, Some(line));
        ending.end.result_text = (!streamed.is_empty()).then_some(streamed);
        ending
    }

    /// The turn was stopped by tether for a reason outside it (the store stayed away):
    /// `interrupted`, like a turn a restart or a failover ended; what it streamed so far
    /// is kept as its result, and the session stays bound for the next message.
    pub fn interrupted(reason: String, streamed: String) -> TurnEnding {
        TurnEnding {
            end: TurnEnd {
                status: TurnStatus::Interrupted,
                result_text: (!streamed.is_empty()).then_some(streamed),
                stop_reason: None,
                error: Some((ErrorCode::Interrupted, reason.clone())),
                usage: None,
            },
            line: Some(NewMessage {
                role: MessageRole::Status,
                text: format!("turn interrupted: {reason}"),
            }),
            event: EventPayload::TurnInterrupted { reason },
            usage: None,
        }
    }

    /// A stored turn that no actor took: it never ran.
    pub fn not_run(code: ErrorCode, message: String) -> TurnEnding {
        let line = format!("not run: {message}");
        TurnEnding::failure(code, message, Some(line))
    }

    /// The session's queue was full: the turn never ran.
    pub fn queue_full(cap: usize) -> TurnEnding {
        let message = format!("the queue is full ({cap} messages wait already)");
        let line = format!("not queued: {message}");
        TurnEnding::failure(ErrorCode::QueueFull, message, Some(line))
    }

    /// A turn that never ran and leaves no history line (its failure is the event and
    /// the row alone: a start that the store refused, a delegated turn its caller is
    /// told of directly).
    pub fn unstarted(code: ErrorCode, message: String) -> TurnEnding {
        TurnEnding::failure(code, message, None)
    }

    fn failure(code: ErrorCode, message: String, line: Option<String>) -> TurnEnding {
        TurnEnding {
            end: TurnEnd {
                status: TurnStatus::Failed,
                result_text: None,
                stop_reason: None,
                error: Some((code, message.clone())),
                usage: None,
            },
            event: EventPayload::TurnFailed { code, message },
            line: line.map(|text| NewMessage {
                role: MessageRole::Status,
                text,
            }),
            usage: None,
        }
    }

    /// How the turn ended: its status, and its error's code when it failed.
    pub fn outcome(&self) -> (TurnStatus, Option<ErrorCode>) {
        (self.end.status, self.end.error.as_ref().map(|e| e.0))
    }

    /// The turn's usage row goes in with its end (a turn whose agent reported nothing:
    /// its end and its "unreported" row become visible together, in one commit).
    pub fn with_usage(&mut self, row: NewUsage) {
        self.usage = Some(row);
    }

    /// The usage row given by [`TurnEnding::with_usage`], for the caller to store when
    /// [`TurnEnding::record`] did not.
    pub fn take_usage(&mut self) -> Option<NewUsage> {
        self.usage.take()
    }

    /// Stores the turn's last `streamed` events, the row, the event, the line and the
    /// usage row in one transaction (the store publishes the events at commit). No
    /// event: the turn had already ended (terminal states are immutable), and the
    /// streamed events are not stored after it. The usage row is left to the caller
    /// when a budget counts it (see `FinishedTurn::usage_stored`).
    pub async fn record(
        &self,
        ctx: &Ctx,
        turn_id: &TurnId,
        streamed: &[EventPayload],
    ) -> Result<FinishedTurn, StoreError> {
        ctx.store
            .conversations()
            .finish_turn_with_usage(
                turn_id,
                &self.end,
                &self.event,
                self.line.as_ref(),
                self.usage.as_ref(),
                streamed,
            )
            .await
    }
}
