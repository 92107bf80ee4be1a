//! The session actor's turn start (a child module of `actor`, so it shares the actor's
//! state): a stored, queued turn is marked running (`begin`), or a message's turn for an
//! idle session is stored already running (`begin_stored`: one commit instead of the
//! insert's and the start's); either way the budgets are read beside the write, then
//! the agent is made live and prompted (`begun`).

use tether_proto::{ErrorCode, TurnId};
use tether_store::{NewTurn, StoreError, TurnBudgets};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{Actor, Current, DeadlineKind};
use crate::session::command::RunIfIdle;
use crate::session::ending::TurnEnding;
use crate::session::turn_step::Step;
use crate::usage::Meter;

impl Actor {
    /// The turn's span, joined to the trace of the call that sent it, and its trace
    /// context for its `turn_started` event (what the channels send for it joins the
    /// trace, issue 31).
    fn turn_span(&mut self, turn_id: &TurnId) -> (tracing::Span, Option<String>) {
        let span = tracing::info_span!(
            "tether.turn",
            otel.name = "turn",
            turn_id = %turn_id,
            conversation_id = %self.session.conversation_id,
            session_id = %self.session.id,
            agent = %self.session.agent,
            node = %self.ctx.config.cluster.node_id,
            trace_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        crate::trace::adopt(&span, self.traces.remove(turn_id));
        let traceparent = crate::trace::traceparent_of(&span);
        (span, traceparent)
    }

    /// Starts the next turn: mark it running, then make the session live, then prompt.
    pub(super) async fn begin(&mut self, turn_id: TurnId, input: String) {
        // A turn accepted while the store answered waits for it to answer again. A start
        // whose answer was lost with the connection may have been stored: then the turn
        // is found running, and runs.
        let (span, traceparent) = self.turn_span(&turn_id);
        let store = self.ctx.store.clone();
        let mut tries = 0u32;
        // The budgets are read beside the start (a reader beside the writer): neither
        // waits for the other.
        let budgets = self.budget_read(&turn_id);
        let start = super::outage::patiently("a turn's start", || {
            tries += 1;
            let first = tries == 1;
            let store = store.clone();
            let turn_id = turn_id.clone();
            let traceparent = traceparent.clone();
            async move {
                match store
                    .conversations()
                    .start_turn(&turn_id, traceparent.as_deref())
                    .await
                {
                    // Started by the try whose answer was lost: whether it has files
                    // is not known, so they are read.
                    Ok(None) if !first => Ok(store
                        .conversations()
                        .get_turn(&turn_id)
                        .await?
                        .filter(|t| t.status == tether_proto::TurnStatus::Running)
                        .map(|_| true)),
                    Ok(r) => Ok(r.map(|s| s.has_attachments)),
                    Err(e) => Err(e),
                }
            }
        });
        let (started, mut budgets) = tokio::join!(start, budgets);
        if tries > 1 {
            // The start waited for the store: what was read beside it is from before the
            // outage (other nodes may have counted usage meanwhile); read it again.
            budgets = self.budget_read(&turn_id).await;
        }
        let has_attachments = match started {
            Ok(Some(files)) => files,
            Ok(None) => {
                tracing::warn!(%turn_id, "turn is no longer queued; skipped");
                return;
            }
            Err(e) => {
                tracing::error!(%turn_id, error = %e, "cannot start turn");
                let ending = TurnEnding::unstarted(
                    ErrorCode::Internal,
                    format!("cannot start the turn: {e}"),
                );
                if let Err(e) = ending.record(&self.ctx, &turn_id, &[]).await {
                    tracing::error!(%turn_id, error = %e, "cannot fail an unstarted turn");
                }
                return;
            }
        };
        self.begun(turn_id, input, span, has_attachments, budgets)
            .await;
    }

    /// Stores a message's turn already running with its message and `turn_started` event
    /// (the session is idle), replies, and runs it. A refused insert stores nothing and
    /// is the caller's error; it is not waited out like a queued turn's start (the
    /// person's message is not accepted yet).
    pub(super) async fn begin_stored(&mut self, turn: NewTurn, reply: oneshot::Sender<RunIfIdle>) {
        let (span, traceparent) = self.turn_span(&turn.id);
        let store = self.ctx.store.clone();
        // Beside the insert, as beside a start; the answer does not wait for it.
        let budgets = self.budget_read(&turn.id);
        let insert = async {
            let inserted = store
                .conversations()
                .insert_started_turn(&turn, traceparent.as_deref())
                .await;
            let has_attachments = match inserted {
                Ok(started) => Some(started.has_attachments),
                // The answer may have been lost after the commit: a turn found running
                // is this insert's (the router stores only queued ones), and runs.
                Err(e) => match store.conversations().get_turn(&turn.id).await {
                    Ok(Some(t)) if t.status == tether_proto::TurnStatus::Running => Some(true),
                    _ => {
                        let _ = reply.send(RunIfIdle::Failed(e));
                        return None;
                    }
                },
            };
            // Sent or not, the turn runs: a router that stopped waiting finds it stored.
            let _ = reply.send(RunIfIdle::Started);
            has_attachments
        };
        let (inserted, budgets) = tokio::join!(insert, budgets);
        let Some(has_attachments) = inserted else {
            return;
        };
        self.begun(turn.id, turn.input, span, has_attachments, budgets)
            .await;
    }

    /// A turn marked running: read its files, check its budgets, make the session live
    /// and prompt.
    async fn begun(
        &mut self,
        turn_id: TurnId,
        input: String,
        span: tracing::Span,
        has_attachments: bool,
        budgets: Result<(Meter, TurnBudgets), StoreError>,
    ) {
        let files = if has_attachments {
            // Waits out an unreachable store like the start did: files given with a
            // message are not dropped for a passing fault.
            let store = self.ctx.store.clone();
            super::outage::patiently("a turn's files", || {
                let (store, turn_id) = (store.clone(), turn_id.clone());
                async move { store.attachments().turn_attachments(&turn_id).await }
            })
            .await
        } else {
            Ok(Vec::new())
        };
        let attachments = match files {
            Ok(a) => a,
            Err(e) => {
                // The text still goes; the person is told the files did not.
                tracing::error!(%turn_id, error = %e, "cannot read the turn's attachments");
                let note =
                    format!("the files sent with this message could not be read ({e}); not sent");
                let told = self
                    .ctx
                    .store
                    .events()
                    .add_message(
                        &self.session.conversation_id,
                        tether_proto::MessageRole::Status,
                        &note,
                        Some(&self.session.id),
                        Some(&turn_id),
                    )
                    .await;
                if let Err(e) = told {
                    tracing::warn!(%turn_id, error = %e, "cannot store an attachment note");
                }
                Vec::new()
            }
        };
        self.ctx.turn_traces.started(&self.session.id, &span);
        self.current = Some(Current {
            span,
            turn_id,
            input,
            attachments,
            cancel_requested: false,
            timed_out: false,
            store_lost: false,
            over_budget: None,
            prompted: false,
            usage_reports: 0,
            text: String::new(),
            started: std::time::Instant::now(),
            agent_time: std::time::Duration::ZERO,
            agent_since: None,
        });
        match self.refused_by_budget(budgets).await {
            super::usage::Refusal::None => {}
            super::usage::Refusal::Budget(message) => {
                // Refused before any agent starts (issue 29).
                self.fail(ErrorCode::BudgetExceeded, message).await;
                return;
            }
            super::usage::Refusal::Limited(until) => {
                // The account is at its vendor's limit: parked at once, the vendor not
                // asked, the message kept for the continuation.
                let message = format!(
                    "{}'s account is at its usage limit; this turn waits for it to reset",
                    self.session.agent
                );
                let input = self.current.as_ref().map(|c| c.input.clone());
                let turn_id = self.current.as_ref().map(|c| c.turn_id.clone());
                self.fail(ErrorCode::UsageLimit, message).await;
                self.park_after_limit(turn_id, Some(until), input).await;
                return;
            }
        }
        if let Some(t) = self.ctx.config.turn_timeout {
            self.deadline = Some((Instant::now() + t, DeadlineKind::TurnTimeout));
        }
        // A worktree missing here (another node's, a cleaned disk, an archived one) comes
        // back from its snapshot before the agent starts or works in it (issue 32).
        if crate::worktree::is_worktree(&self.session.cwd)
            && !std::path::Path::new(&self.session.cwd).exists()
        {
            match crate::worktree::restore_if_missing(&self.ctx, &self.session.conversation_id)
                .await
            {
                Ok(Some(note)) => self.status_line(&note).await,
                Ok(None) => {}
                Err(e) => {
                    self.fail(e.code(), format!("cannot restore the worktree: {e}"))
                        .await;
                    return;
                }
            }
        }
        if self.live.as_ref().is_some_and(|l| l.is_alive()) {
            self.pool_busy();
            self.spawn_prompt()
        } else {
            // In a task, so that a stop can abandon the start.
            let req = self.prepare_start().await;
            if let Some(c) = self.current.as_mut() {
                c.agent_since = Some(std::time::Instant::now());
            }
            let ctx = self.ctx.clone();
            let span = self.current.as_ref().map_or_else(tracing::Span::none, |c| {
                tracing::info_span!(parent: &c.span, "agent.start", otel.name = "agent start", resume = req.resume.is_some())
            });
            self.task = Some(tokio::spawn(
                async move { Step::Started(ctx.start_agent(req).await) }.instrument(span),
            ));
        }
    }
}
