//! Reports every ended turn of a delegated task once: `delegation_completed` for the
//! first turn, `delegation_session_update` for later ones, on the parent's session (or
//! on the child's own session when the task has no parent session). The watcher follows
//! the feed of every task not released yet (a task is followed from its creation until
//! it is closed); at start-up it first reports what a restart left unreported (turns
//! interrupted by recovery) — until then delegation requests get `rebuilding`. Each row
//! is handled on its own: one that keeps failing is retried a few times, then recorded
//! as unreportable, and never holds up the others.
//!
//! In a cluster (issue 26, item 1) following tasks is every live node's duty, not only
//! the creating node's: each node looks every [`CLUSTER_LOOK`] for unreleased tasks it
//! does not follow yet (created on another node since it started) and follows them, and
//! reports any ended turn nobody reported yet (a turn a dead node's recovery interrupted,
//! a continuation that ran on a node that died before its watcher saw the end). A report
//! is claimed in the store (`reported_at`) in the same transaction that writes it, so
//! however many nodes see an end, the parent gets it once.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::Stream;
use tether_proto::{ConversationId, EventPayload, TaskId, TurnId, TurnOrigin};
use tether_store::{Batch, Scope};
use tokio_stream::{StreamExt, StreamMap};

use crate::boot::Inner;
use crate::delegation::Delegations;
use crate::delegation::status::outcome_of;
use crate::delegation::watch_list::WatchCmd;
use crate::error::Result;
use crate::{Runtime, RuntimeError};

type TaskFeed = Pin<Box<dyn Stream<Item = tether_store::Result<Arc<Batch>>> + Send>>;

/// How often a node of a cluster looks for tasks to follow and ends to report.
const CLUSTER_LOOK: Duration = Duration::from_secs(1);

/// Attempts at reporting one turn before it is recorded as unreportable.
const REPORT_ATTEMPTS: u32 = 4;
/// First pause between attempts (doubling, at most [`RETRY_MAX`]).
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);

fn upgrade(weak: &Weak<Inner>) -> Option<Runtime> {
    weak.upgrade().map(|inner| Runtime { inner, who: None })
}

impl Delegations<'_> {
    /// Starts the outcome watcher (called once by [`Runtime::start`]). Delegation
    /// requests answer `rebuilding` until its start-up pass has handled every row.
    pub(crate) fn start_delegation_watch(&self) {
        let Some(mut cmds) = self.rt.ctx().delegation_watch.take() else {
            return;
        };
        let weak: Weak<Inner> = Arc::downgrade(&self.rt.inner);
        tokio::spawn(async move {
            let mut feeds: StreamMap<TaskId, TaskFeed> = StreamMap::new();
            if let Some(rt) = upgrade(&weak) {
                // Follow first, then report what is pending: nothing falls in between.
                for task_id in rt.delegations().unreleased_tasks().await {
                    match rt.delegations().task_feed(&task_id).await {
                        Ok(f) => {
                            feeds.insert(task_id, f);
                        }
                        Err(e) => {
                            tracing::error!(%task_id, error = %e, "cannot follow a delegated task");
                        }
                    }
                }
                rt.delegations().report_pending_delegation_turns().await;
                rt.ctx().delegation.set_ready();
            }
            let clustered = upgrade(&weak).is_some_and(|rt| rt.ctx().ownership.clustered());
            let mut look = tokio::time::interval(CLUSTER_LOOK);
            look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = look.tick(), if clustered => {
                        let Some(rt) = upgrade(&weak) else { return };
                        rt.delegations().look_at_cluster_tasks(&mut feeds).await;
                    }
                    cmd = cmds.recv() => match cmd {
                        Some(WatchCmd::Follow(task_id, f)) => {
                            feeds.insert(task_id, Box::pin(f.into_stream()));
                        }
                        Some(WatchCmd::Forget(task_id)) => {
                            feeds.remove(&task_id);
                        }
                        None => return,
                    },
                    Some((task_id, got)) = feeds.next() => {
                        let Some(rt) = upgrade(&weak) else { return };
                        match got {
                            Ok(batch) => rt.delegations().report_ended_turns(&batch).await,
                            Err(e) => {
                                // The follower fills its gap when asked again.
                                tracing::warn!(%task_id, error = %e, "cannot read a delegated task's events");
                                tokio::time::sleep(RETRY_FIRST).await;
                            }
                        }
                    }
                }
            }
        });
    }

    /// A cluster's look (see the module header): follows the unreleased tasks it does not
    /// follow yet, and reports every ended turn nobody reported. Failures wait for the
    /// next look.
    async fn look_at_cluster_tasks(&self, feeds: &mut StreamMap<TaskId, TaskFeed>) {
        let store = &self.rt.ctx().store;
        match store.delegation().unreleased_delegation_ids().await {
            Ok(ids) => {
                // A task released (on any node) ends no more turns: stop following it.
                let gone: Vec<TaskId> =
                    feeds.keys().filter(|t| !ids.contains(t)).cloned().collect();
                for t in gone {
                    feeds.remove(&t);
                }
                for task_id in ids {
                    if feeds.contains_key(&task_id) {
                        continue;
                    }
                    match self.task_feed(&task_id).await {
                        Ok(f) => {
                            feeds.insert(task_id, f);
                        }
                        Err(e) => tracing::debug!(%task_id, error = %e, "cannot follow a task yet"),
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot list delegated tasks yet"),
        }
        match store.delegation().unreported_delegation_turn_ids().await {
            Ok(ids) => {
                for turn_id in ids {
                    if let Err(e) = self.report_delegation_turn(&turn_id).await {
                        tracing::debug!(%turn_id, error = %e, "cannot report a delegated turn yet");
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot list unreported delegated turns yet"),
        }
    }

    /// Follows a new task from its first event (call right after it is stored).
    pub(crate) async fn watch_task(&self, task_id: &TaskId) -> Result<()> {
        let f = self
            .rt
            .ctx()
            .store
            .events()
            .follow(Scope::Conversation(task_id.conversation_id()), 0)
            .await?;
        self.rt
            .ctx()
            .delegation_watch
            .send(WatchCmd::Follow(task_id.clone(), f));
        Ok(())
    }

    /// A released task ends no more turns: stop following it.
    pub(crate) fn forget_task(&self, task_id: &TaskId) {
        self.rt
            .ctx()
            .delegation_watch
            .send(WatchCmd::Forget(task_id.clone()));
    }

    /// Follows a task from now on (at start-up, before the pending turns are reported).
    async fn task_feed(&self, task_id: &TaskId) -> Result<TaskFeed> {
        let scope = Scope::Conversation(task_id.conversation_id());
        let f = self.rt.ctx().store.events().follow_from_now(scope).await?;
        Ok(Box::pin(f.into_stream()))
    }

    /// The tasks to follow at start-up; retried until the list can be read.
    async fn unreleased_tasks(&self) -> Vec<TaskId> {
        let mut delay = RETRY_FIRST;
        loop {
            match self
                .rt
                .ctx()
                .store
                .delegation()
                .unreleased_delegation_ids()
                .await
            {
                Ok(ids) => return ids,
                Err(e) => {
                    tracing::error!(error = %e, "cannot list delegated tasks; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Reports the turns that ended in `batch`.
    async fn report_ended_turns(&self, batch: &Batch) {
        for ev in batch.events() {
            if let (Some(turn_id), true) = (&ev.turn_id, ev.payload.is_turn_terminal())
                && let Err(e) = self.report_delegation_turn(turn_id).await
            {
                tracing::error!(%turn_id, error = %e, "cannot report a delegated turn");
            }
        }
    }

    /// Reports every ended, unreported turn, each on its own (see [`Self::report_or_give_up`]).
    /// Listing them is retried until it works: without the list nothing is handled.
    async fn report_pending_delegation_turns(&self) {
        let mut delay = RETRY_FIRST;
        let ids = loop {
            match self
                .rt
                .ctx()
                .store
                .delegation()
                .unreported_delegation_turn_ids()
                .await
            {
                Ok(ids) => break ids,
                Err(e) => {
                    tracing::error!(error = %e, "cannot list unreported delegated turns; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        };
        for turn_id in ids {
            self.report_or_give_up(&turn_id).await;
        }
    }

    /// Reports one turn, retrying a failure [`REPORT_ATTEMPTS`] times in all; then records
    /// it as unreportable (marked handled, with a status event saying why).
    async fn report_or_give_up(&self, turn_id: &TurnId) {
        let mut delay = RETRY_FIRST;
        let mut last = String::new();
        for attempt in 1..=REPORT_ATTEMPTS {
            match self.report_delegation_turn(turn_id).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(%turn_id, attempt, error = %e, "cannot report a delegated turn");
                    last = e.to_string();
                }
            }
            if attempt < REPORT_ATTEMPTS {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
        tracing::error!(
            %turn_id,
            error = last,
            "giving up on reporting a delegated turn"
        );
        match self
            .rt
            .ctx()
            .store
            .delegation()
            .record_unreportable_turn(turn_id, &last)
            .await
        {
            Ok(_) => {}
            Err(e) => {
                tracing::error!(%turn_id, error = %e, "cannot record an unreportable delegated turn");
            }
        }
    }

    /// Reports one ended turn if it belongs to a task (no-op otherwise or if done). The
    /// report is written by the owner of the conversation it goes to, fenced, like any
    /// other write of that conversation (issue 26 item 3): one session's events have one
    /// writer, so a follower on any node sees them once and in order.
    async fn report_delegation_turn(&self, turn_id: &TurnId) -> Result<()> {
        let Some(target) = self.report_target(turn_id).await? else {
            return Ok(());
        };
        if self.rt.ctx().ownership.clustered() {
            let store = &self.rt.ctx().store;
            if let Some(owner) = store.cluster().conversation_owner(&target).await?
                && owner.node_id != self.rt.ctx().config.cluster.node_id
            {
                // Its owner's watcher looks every second and writes it.
                return Ok(());
            }
        }
        // Owned here, or by nobody: placed like any command (claimed and so fenced).
        let command = crate::call::Command::ReportTurn {
            conversation_id: target,
            turn_id: turn_id.clone(),
        };
        self.rt
            .call_as(command, crate::call::Principal::System)
            .await
    }

    /// The conversation an ended, unreported delegation turn is reported in (the
    /// parent's, or the task's own without a parent session); `None`: nothing to report.
    async fn report_target(&self, turn_id: &TurnId) -> Result<Option<ConversationId>> {
        let store = &self.rt.ctx().store;
        let Some(dt) = store.delegation().delegation_turn(turn_id).await? else {
            return Ok(None);
        };
        if dt.reported {
            return Ok(None);
        }
        let Some(turn) = store.conversations().get_turn(turn_id).await? else {
            return Ok(None);
        };
        if !turn.status.is_terminal() {
            return Ok(None);
        }
        let target = match store.delegation().get_delegation(&dt.task_id).await? {
            Some(d) if d.parent_session_id.is_some() => d.parent_conversation_id,
            _ => None,
        };
        Ok(Some(target.unwrap_or_else(|| dt.task_id.conversation_id())))
    }

    /// Writes the report of an ended delegation turn, once (claimed in the store with the
    /// write); on the node that owns its conversation.
    pub(crate) async fn write_report(&self, turn_id: &TurnId) -> Result<()> {
        let store = &self.rt.ctx().store;
        let Some(dt) = store.delegation().delegation_turn(turn_id).await? else {
            return Ok(());
        };
        if dt.reported {
            return Ok(());
        }
        let turn = store
            .conversations()
            .get_turn(turn_id)
            .await?
            .ok_or_else(|| RuntimeError::Internal(format!("turn {turn_id} vanished")))?;
        if !turn.status.is_terminal() {
            return Ok(());
        }
        let outcome = outcome_of(&turn, self.rt.ctx().clock.now_ms());
        let payload = if dt.turn_version == 1 && dt.origin == TurnOrigin::Parent {
            EventPayload::DelegationCompleted {
                task_id: dt.task_id,
                turn_id: dt.turn_id,
                turn_version: dt.turn_version,
                outcome,
            }
        } else {
            EventPayload::DelegationSessionUpdate {
                task_id: dt.task_id,
                turn_id: dt.turn_id,
                turn_version: dt.turn_version,
                origin: dt.origin,
                outcome,
            }
        };
        store
            .delegation()
            .report_delegation_turn(turn_id, &payload)
            .await?;
        Ok(())
    }
}
