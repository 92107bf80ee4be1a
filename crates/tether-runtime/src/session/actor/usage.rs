//! The session actor's usage (a child module of `actor`): each report the agent sends is
//! a ledger row written as it arrives (issue 29), which also counts it toward every
//! budget it falls under; the report that crosses a warning line posts a status line,
//! the one that crosses a hard cap stops the turn (`budget_exceeded`). A turn whose agent
//! reported nothing gets one row marked unreported: an unknown, never a silent zero.
//! Rows the store could not take wait (bounded) and go with the next write.

use tether_agents::UsageReport;
use tether_agents::windows::WindowReport;
use tether_proto::{MessageRole, TurnId};
use tether_store::{BudgetHit, BudgetUse, Recorded, StoreError, TurnBudgets};

use super::Actor;
use crate::session::ending::TurnEnding;
use crate::usage::{Meter, describe};

/// Why a turn may not start (see `refused_by_budget`).
pub(super) enum Refusal {
    None,
    /// A budget at its cap: the message.
    Budget(String),
    /// The account is at its vendor's limit until then.
    Limited(i64),
}

/// Rows kept for an unreachable store; past it the oldest are dropped, and said so.
const MAX_UNSAVED: usize = 10_000;

impl Actor {
    /// The session's meter (read again before each turn, see `refused_by_budget`).
    async fn meter(&mut self) -> Option<Meter> {
        if self.meter.is_none() {
            match Meter::of(&self.ctx, &self.session, None).await {
                Ok((m, _)) => self.meter = Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read whom the usage counts for");
                    return None;
                }
            }
        }
        self.meter.clone()
    }

    /// A report from the agent (`None`: the turn ended without any); whether a hard cap
    /// now stops the running turn (the caller stops it).
    pub(super) async fn on_usage(&mut self, report: Option<UsageReport>) -> bool {
        if let Some(c) = self.current.as_mut()
            && report.is_some()
        {
            c.usage_reports += 1;
        }
        let Some(row) = self.usage_row(report.as_ref()).await else {
            return false;
        };
        self.keep_unsaved(row);
        self.save_usage().await
    }

    /// Queues a row for `save_usage`, the oldest dropped past [`MAX_UNSAVED`].
    fn keep_unsaved(&mut self, row: tether_store::NewUsage) {
        if self.unsaved_usage.len() >= MAX_UNSAVED {
            self.unsaved_usage.remove(0);
            tracing::error!("usage rows dropped: the store stayed unreachable");
        }
        self.unsaved_usage.push(row);
    }

    /// Before the running turn's end. A turn whose agent reported nothing gets its
    /// "unreported" row with its end (one commit, not two on the turn's path; see
    /// `usage_after_end`); otherwise the rows waiting are written first.
    pub(super) async fn usage_before_end(&mut self, ending: &mut TurnEnding) {
        let unreported = self
            .current
            .as_ref()
            .is_some_and(|c| c.prompted && c.usage_reports == 0);
        if unreported && self.unsaved_usage.is_empty() {
            if let Some(row) = self.usage_row(None).await {
                ending.with_usage(row);
            }
        } else if unreported {
            // The turn ends either way: a cap it crossed refuses the next one.
            let _ = self.on_usage(None).await;
        } else {
            let _ = self.save_usage().await;
        }
    }

    /// After the turn's end: its usage row when the end did not store it (a budget
    /// counts it, or the end failed), on its own and counted.
    pub(super) async fn usage_after_end(&mut self, ending: &mut TurnEnding, stored: bool) {
        if !stored && let Some(row) = ending.take_usage() {
            self.keep_unsaved(row);
            let _ = self.save_usage().await;
        }
    }

    /// The ledger row of a report of the running turn (`None`: the turn's agent reported
    /// nothing); `None` when whom it counts for cannot be read.
    pub(super) async fn usage_row(
        &mut self,
        report: Option<&UsageReport>,
    ) -> Option<tether_store::NewUsage> {
        let turn_id = self.current.as_ref().map(|c| c.turn_id.clone());
        let meter = self.meter().await?;
        Some(meter.row(&self.ctx, &self.session, turn_id.as_ref(), report))
    }

    /// Writes the rows waiting, oldest first, until one cannot be written; whether a
    /// hard cap now stops the running turn.
    pub(super) async fn save_usage(&mut self) -> bool {
        let mut stop = false;
        while let Some(row) = self.unsaved_usage.first() {
            match self.ctx.store.usage().record_usage(row).await {
                Ok(recorded) => {
                    self.unsaved_usage.remove(0);
                    stop |= self.on_recorded(recorded).await;
                }
                Err(e) if e.is_unavailable() => {
                    tracing::warn!(error = %e, waiting = self.unsaved_usage.len(), "usage waits for the store");
                    return stop;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot store a usage row");
                    self.unsaved_usage.remove(0);
                }
            }
        }
        stop
    }

    /// The vendor's report of the account's window: stored (the account's fullest
    /// window before and after it read in the same transaction), then held against the
    /// window budgets the turn counts toward as a ledger row is against its counters;
    /// whether a hard cap now stops the running turn.
    pub(super) async fn on_window(&mut self, report: WindowReport) -> bool {
        let Some(meter) = self.meter().await else {
            return false;
        };
        let stored = self
            .ctx
            .store
            .usage()
            .record_window(
                &meter.account,
                &report.window,
                i64::from(report.used_percent),
                report.resets_at_ms,
            )
            .await;
        let (before, after) = match stored {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot store a usage window report");
                return false;
            }
        };
        let budgets = meter
            .window_budgets
            .iter()
            .map(|b| BudgetHit {
                crossing: tether_core::budget::crossing(
                    b.cap,
                    b.warn_percent,
                    after,
                    after - before,
                ),
                usage: BudgetUse {
                    budget: b.clone(),
                    period_start_ms: 0,
                    used: after,
                },
            })
            .collect();
        self.on_recorded(Recorded {
            inserted: true,
            budgets,
        })
        .await
    }

    /// Tells the warnings; marks the running turn over budget (true) at a hard cap.
    async fn on_recorded(&mut self, recorded: Recorded) -> bool {
        for hit in recorded.budgets.iter().filter(|h| h.crossing.warned) {
            let warn = hit.usage.budget.warn_percent.unwrap_or(0);
            let text = format!("⚠️ {warn} % of {}", describe(&hit.usage));
            self.status_line(&text).await;
        }
        let Some(over) = recorded.over() else {
            return false;
        };
        let running = self
            .current
            .as_ref()
            .is_some_and(|c| !c.cancel_requested && c.over_budget.is_none());
        if running {
            let message = format!("stopped: {} (budget_exceeded)", describe(&over.usage));
            if let Some(c) = self.current.as_mut() {
                c.over_budget = Some(message);
            }
        }
        running
    }

    /// After a turn the vendor's limit stopped (or one refused because its account is
    /// limited): parks the conversation for a continuation and says so (see `parking`).
    pub(super) async fn park_after_limit(
        &mut self,
        turn_id: Option<TurnId>,
        resets_at_ms: Option<i64>,
        unsent: Option<String>,
    ) {
        let account = self.ctx.config.usage.account(&self.session.agent);
        let line = crate::parking::park(
            &self.ctx,
            &self.session.conversation_id,
            turn_id.as_ref(),
            &self.session.agent,
            &account,
            resets_at_ms,
            unsent.as_deref(),
        )
        .await;
        self.status_line(&line).await;
    }

    /// A status line in the conversation (and so on the page and the channels).
    pub(super) async fn status_line(&self, text: &str) {
        let turn_id = self.current.as_ref().map(|c| c.turn_id.clone());
        let added = self
            .ctx
            .store
            .events()
            .add_message(
                &self.session.conversation_id,
                MessageRole::Status,
                text,
                Some(&self.session.id),
                turn_id.as_ref(),
            )
            .await;
        if let Err(e) = added {
            tracing::warn!(error = %e, "cannot post a budget status line");
        }
    }

    /// The read before a turn prompts its agent (its budgets, the meter read afresh: the
    /// conversation may have changed hands; its parked continuations): it writes nothing
    /// and owns what it needs, so it runs beside the turn's start. It waits for an
    /// unreachable store.
    pub(super) fn budget_read(
        &self,
        turn_id: &TurnId,
    ) -> impl std::future::Future<Output = Result<(Meter, TurnBudgets), StoreError>> + 'static {
        let (ctx, session, turn_id) = (self.ctx.clone(), self.session.clone(), turn_id.clone());
        async move {
            super::outage::patiently("a budget check", || {
                Meter::of(&ctx, &session, Some(&turn_id))
            })
            .await
        }
    }

    /// Once the turn started, from [`Actor::budget_read`]: the budget that refuses it, if
    /// any, and the parked continuation it supersedes cancelled. It refuses when the
    /// budgets could not be read: a cap never fails open.
    pub(super) async fn refused_by_budget(
        &mut self,
        read: Result<(Meter, TurnBudgets), StoreError>,
    ) -> Refusal {
        let refused = |e: StoreError| {
            tracing::error!(error = %e, "cannot read the budgets");
            Refusal::Budget(format!(
                "refused: the budgets could not be read: {e} (budget_exceeded)"
            ))
        };
        let (meter, budgets) = match read {
            Ok(r) => r,
            Err(e) => return refused(e),
        };
        self.meter = Some(meter);
        if budgets.parked.any()
            && let Some(turn_id) = self.current.as_ref().map(|c| c.turn_id.clone())
        {
            let (ctx, conv) = (self.ctx.clone(), self.session.conversation_id.clone());
            let superseded = super::outage::patiently("a parked continuation's end", || {
                ctx.store.usage().supersede_parking(
                    &conv,
                    turn_id.as_str(),
                    ctx.clock.now_ms(),
                    &budgets.parked,
                )
            })
            .await;
            if let Err(e) = superseded {
                return refused(e);
            }
        }
        if let Some(blocking) = budgets.blocking() {
            let m = format!("refused: {} (budget_exceeded)", describe(blocking));
            return Refusal::Budget(m);
        }
        match budgets.account_limited_until {
            Some(until) => Refusal::Limited(until),
            None => Refusal::None,
        }
    }
}
