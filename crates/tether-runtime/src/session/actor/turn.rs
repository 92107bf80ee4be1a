//! The session actor's turn: start it, prompt the agent, stop it, and end it with one
//! [`TurnEnding`] (a child module of `actor`, so it shares the actor's state).

use tether_agents::{AgentError, StopReason, TurnOutcome};
use tether_proto::{ApprovalStatus, ErrorCode};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{Actor, CANCEL_REPEAT, DeadlineKind};
use crate::session::command::STOP_GRACE;
use crate::session::ending::TurnEnding;
use crate::session::turn_step::Step;

impl Actor {
    pub(super) fn spawn_prompt(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.prompted = true;
            c.agent_done();
            c.agent_since = Some(std::time::Instant::now());
        }
        let (Some(live), Some(cur)) = (self.live.clone(), self.current.as_ref()) else {
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        self.events = Some(rx);
        let input = cur.input.clone();
        let span = tracing::info_span!(parent: &cur.span, "agent.prompt", otel.name = "agent prompt", agent = %self.session.agent);
        if cur.attachments.is_empty() {
            self.task = Some(tokio::spawn(
                async move { Step::Prompted(live.prompt(&input, tx).await) }.instrument(span),
            ));
            return;
        }
        let attachments = cur.attachments.clone();
        let (ctx, turn_id) = (self.ctx.clone(), cur.turn_id.clone());
        let session = self.session.clone();
        self.task = Some(tokio::spawn(
            async move {
                let prepared = crate::attachments::prompt::prepare(
                    &crate::attachments::blobs::Blobs::of(&ctx.config),
                    std::path::Path::new(&session.cwd),
                    &session.conversation_id,
                    &input,
                    &attachments,
                    live.accepts_images(),
                )
                .await;
                for note in &prepared.notes {
                    // Not a silent drop: what did not reach the agent as sent is said.
                    let stored = ctx
                        .store
                        .events()
                        .add_message(
                            &session.conversation_id,
                            tether_proto::MessageRole::Status,
                            note,
                            Some(&session.id),
                            Some(&turn_id),
                        )
                        .await;
                    if let Err(e) = stored {
                        tracing::warn!(%turn_id, error = %e, "cannot store an attachment note");
                    }
                }
                Step::Prompted(live.prompt_with(&prepared.prompt, tx).await)
            }
            .instrument(span),
        ));
    }

    pub(super) async fn on_step(&mut self, step: Step) {
        if let Some(c) = self.current.as_mut() {
            c.agent_done();
        }
        match step {
            Step::Started(started) => self.on_started(started).await,
            Step::Prompted(result) => {
                self.drain_events().await;
                self.on_prompted(result).await;
            }
            Step::Aborted(reason) => {
                tracing::warn!(reason, "turn task ended abnormally");
                self.fail(ErrorCode::Internal, reason).await;
            }
        }
    }

    pub(super) async fn on_prompted(&mut self, result: Result<TurnOutcome, AgentError>) {
        let (cancel_requested, stopped_by_tether) = match &self.current {
            Some(c) => (
                c.cancel_requested,
                c.timed_out || c.store_lost || c.over_budget.is_some(),
            ),
            None => return,
        };
        if stopped_by_tether {
            self.end_stopped().await;
        } else {
            match result {
                Ok(outcome) if cancel_requested || outcome.stop_reason == StopReason::Cancelled => {
                    self.finish_cancelled().await
                }
                Ok(outcome) => self.complete(outcome).await,
                Err(_) if cancel_requested => self.finish_cancelled().await,
                Err(AgentError::UsageLimit {
                    message,
                    resets_at_ms,
                }) => {
                    let turn_id = self.current.as_ref().map(|c| c.turn_id.clone());
                    self.fail(ErrorCode::UsageLimit, message).await;
                    self.park_after_limit(turn_id, resets_at_ms, None).await;
                }
                Err(e) => {
                    if e.code() == ErrorCode::ResumeUnavailable {
                        // The agent is not in the session we asked for: never prompt it again.
                        self.go_dormant("the agent could not resume the session")
                            .await;
                    }
                    self.fail(e.code(), e.to_string()).await
                }
            }
        }
        if self.live.as_ref().is_some_and(|l| !l.is_alive()) {
            self.go_dormant("the agent process exited").await;
        }
    }

    pub(super) async fn stop(&mut self) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        if cur.cancel_requested {
            return;
        }
        cur.cancel_requested = true;
        self.cancel_pending(ApprovalStatus::Cancelled).await;
        match (&self.live, self.events.is_some()) {
            (Some(live), true) => {
                let live = live.clone();
                self.canceller = Some(tokio::spawn(async move {
                    loop {
                        if let Err(e) = live.cancel().await {
                            tracing::warn!(error = %e, "cancel failed");
                            return;
                        }
                        tokio::time::sleep(CANCEL_REPEAT).await;
                    }
                }));
                self.deadline = Some((Instant::now() + STOP_GRACE, DeadlineKind::StopGrace));
            }
            _ => {
                // Still starting the agent: abandon the start (and the token it got).
                if let Some(task) = self.task.take() {
                    task.abort();
                }
                if self.live.is_none() {
                    self.ctx.delegation.revoke(&self.session.id);
                }
                self.end_stopped().await;
            }
        }
    }

    pub(super) async fn on_deadline(&mut self, kind: DeadlineKind) {
        match kind {
            DeadlineKind::TurnTimeout => {
                if let Some(c) = self.current.as_mut() {
                    c.timed_out = true;
                }
                self.stop().await;
            }
            DeadlineKind::StopGrace => {
                // The agent ignored the cancel: end its process.
                if let Some(task) = self.task.take() {
                    task.abort();
                }
                self.events = None;
                self.end_stopped().await;
                self.go_dormant("the agent did not end the cancelled turn")
                    .await;
            }
        }
    }

    /// Ends a stopped turn: `turn_timeout` when the timeout stopped it, `budget_exceeded`
    /// when a budget did, else `cancelled`.
    pub(super) async fn end_stopped(&mut self) {
        if let Some(message) = self.current.as_ref().and_then(|c| c.over_budget.clone()) {
            self.fail(ErrorCode::BudgetExceeded, message).await;
        } else if self.current.as_ref().is_some_and(|c| c.store_lost) {
            let ending = TurnEnding::interrupted(self.store_lost_message(), self.streamed());
            self.end_turn(ending).await;
        } else if self.current.as_ref().is_some_and(|c| c.timed_out) {
            let secs = self
                .ctx
                .config
                .turn_timeout
                .map(|d| d.as_secs())
                .unwrap_or(0);
            self.fail(
                ErrorCode::TurnTimeout,
                format!("the turn ran longer than {secs}s"),
            )
            .await;
        } else {
            self.finish_cancelled().await;
        }
    }

    /// What the running turn streamed so far.
    pub(super) fn streamed(&self) -> String {
        self.current
            .as_ref()
            .map(|c| c.text.clone())
            .unwrap_or_default()
    }

    pub(super) async fn complete(&mut self, outcome: TurnOutcome) {
        let ending = TurnEnding::completed(outcome, self.streamed());
        self.end_turn(ending).await;
    }

    pub(super) async fn finish_cancelled(&mut self) {
        let ending = TurnEnding::cancelled(self.streamed());
        self.end_turn(ending).await;
    }

    pub(super) async fn fail(&mut self, code: ErrorCode, mut message: String) {
        if code == ErrorCode::ResumeUnavailable {
            message.push_str(". The session stays bound; send /new to start a new one.");
        }
        let ending = TurnEnding::failed(code, message, self.streamed());
        self.end_turn(ending).await;
    }

    pub(super) async fn end_turn(&mut self, mut ending: TurnEnding) {
        if !self.approvals.is_empty() || !self.questions.is_empty() {
            // The agent's output goes before the cancellation of what it asked.
            self.store_held().await;
        }
        self.usage_before_end(&mut ending).await;
        if let Some(c) = self.canceller.take() {
            c.abort();
        }
        self.cancel_pending(ApprovalStatus::Cancelled).await;
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.events = None;
        self.deadline = None;
        let Some(mut cur) = self.current.take() else {
            return;
        };
        cur.agent_done();
        self.ctx.turn_traces.ended(&self.session.id);
        if crate::worktree::is_worktree(&self.session.cwd) {
            // The worktree's state after every turn (issue 32), off the actor's path.
            let (ctx, conv) = (self.ctx.clone(), self.session.conversation_id.clone());
            let why = format!("tether: after turn {}", cur.turn_id);
            tokio::spawn(async move {
                if let Err(e) = crate::worktree::snapshot(&ctx, &conv, &why).await {
                    tracing::warn!(conversation = %conv, error = %e, "cannot snapshot the worktree");
                }
            });
        }
        self.waits.clear();
        let (status, code) = ending.outcome();
        cur.span.record("outcome", status.as_str());
        crate::metrics::turn_ended(
            &self.session.agent,
            status,
            code,
            cur.started.elapsed(),
            cur.agent_time,
        );
        if self.live.is_some() {
            self.ctx.pool.idle(&self.session.id);
        }
        // The events that waited (for the store, or for this end) go first, in the end's
        // transaction; the end waits for the store as long as it takes (a turn never
        // stays running once the database is back).
        let streamed = self.take_for_end().await;
        let ctx = self.ctx.clone();
        let usage_stored = match super::outage::patiently("a turn's end", || {
            ending.record(&ctx, &cur.turn_id, &streamed)
        })
        .await
        {
            Ok(finished) => {
                if finished.event.is_none() {
                    tracing::warn!(turn_id = %cur.turn_id, dropped = streamed.len(),
                        "turn had already ended");
                }
                if !finished.streamed.is_empty() {
                    self.ctx.streamed.batch(finished.streamed.len());
                }
                finished.usage_stored
            }
            Err(e) => {
                tracing::error!(error = %e, events = streamed.len(), "cannot finish turn");
                if !streamed.is_empty() && !matches!(e, tether_store::StoreError::Fenced { .. }) {
                    // The agent's output is kept even so, on its own.
                    let stored = self
                        .ctx
                        .store
                        .events()
                        .append_events(&self.session.id, Some(&cur.turn_id), &streamed)
                        .await;
                    if let Err(e) = stored {
                        tracing::error!(error = %e, "cannot store agent events");
                    }
                }
                false
            }
        };
        self.usage_after_end(&mut ending, usage_stored).await;
    }
}
