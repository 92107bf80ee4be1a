//! Commands between nodes: a sender stores the command for the owner and waits for the
//! reply (woken by the reply's notice, or finding it at its next look); the owner's
//! worker takes each command stored for it (conditionally: exactly once), runs it as if
//! it had arrived there, and stores the reply. A command whose owner died before taking
//! it is given up and routed again; one it took and never answered is `owner_lost`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tether_store::{CommandRow, CommandStatus, NewCommand, Wakeup};

use super::wire::{Envelope, WireReply};
use super::{POLL, Waiter};
use crate::boot::Inner;
use crate::cluster::service::Placement;
use crate::error::Result;
use crate::ids::new_id;
use crate::{Runtime, RuntimeError};
use tether_proto::{CommandId, NodeId};

/// Commands left behind by senders that went away are removed after this long.
const PRUNE_AFTER: Duration = Duration::from_secs(3600);
/// Commands taken per look.
const TAKE_BATCH: u32 = 64;

/// What became of a forwarded command.
pub(crate) enum Sent {
    /// The owner's reply.
    Replied(WireReply),
    /// Nobody took it before its node died: decide again.
    Reroute,
}

fn upgrade(weak: &Weak<Inner>) -> Option<Runtime> {
    weak.upgrade().map(|inner| Runtime { inner, who: None })
}

/// Takes this node's commands as they come (woken by a notice, or every [`POLL`]) and
/// runs each in a task of its own; prunes what senders left behind now and then.
async fn worker(weak: Weak<Inner>) {
    let mut last_prune = 0;
    let mut trouble = tether_core::FailureRun::default();
    loop {
        let Some(rt) = upgrade(&weak) else { return };
        let stopping = rt.ctx().delegation.stopping().clone();
        let work = async {
            let _ = tokio::time::timeout(POLL, rt.placement().cluster().work.notified()).await;
        };
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = work => {}
        }
        let store = &rt.ctx().store;
        let me = rt.placement().cluster().node_id().to_owned();
        let taken = match store
            .cluster()
            .take_pending_commands(&me, rt.ctx().clock.now_ms(), TAKE_BATCH)
            .await
        {
            Ok(t) => {
                if trouble.recover() > 0 {
                    tracing::info!("forwarded commands are taken again");
                }
                t
            }
            Err(e) => {
                if trouble.fail() {
                    tracing::warn!(error = %e, "cannot take forwarded commands; retrying quietly");
                } else {
                    tracing::debug!(error = %e, "cannot take forwarded commands");
                }
                continue;
            }
        };
        if taken.len() == TAKE_BATCH as usize {
            // More wait: look again at once.
            rt.placement().cluster().work.notify_one();
        }
        for row in taken {
            let rt = rt.clone();
            tokio::spawn(async move { rt.placement().run_taken(row).await });
        }
        let now = rt.ctx().clock.now_ms();
        if now - last_prune > 60_000 {
            last_prune = now;
            let before = now - super::place::ttl_ms(PRUNE_AFTER);
            if let Err(e) = store.cluster().prune_commands(before).await {
                tracing::warn!(error = %e, "cannot prune forwarded commands");
            }
        }
    }
}

/// Turns the database's notices into wake-ups of the worker and the senders; reconnects
/// after a failure (polling covers the gap).
async fn listener(weak: Weak<Inner>) {
    loop {
        let Some(rt) = upgrade(&weak) else { return };
        let stopping = rt.ctx().delegation.stopping().clone();
        let store = rt.ctx().store.clone();
        drop(rt);
        let mut wakeups = match store.cluster().command_wakeups().await {
            Ok(Some(w)) => w,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for forwarded commands; retrying");
                tokio::select! {
                    _ = stopping.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        // Anything stored before the listener was up.
        if let Some(rt) = upgrade(&weak) {
            rt.placement().cluster().wake_all();
        }
        loop {
            let next = tokio::select! {
                _ = stopping.cancelled() => return,
                n = wakeups.next() => n,
            };
            let Some(rt) = upgrade(&weak) else { return };
            let cluster = rt.placement().cluster();
            match next {
                Ok(Wakeup::Command(node)) if node == cluster.node_id().as_str() => {
                    cluster.work.notify_one()
                }
                Ok(Wakeup::Command(_)) => {}
                Ok(Wakeup::Reply(id)) => cluster.replied(&id),
                Ok(Wakeup::Reconnected) => cluster.wake_all(),
                Err(e) => {
                    tracing::warn!(error = %e, "lost the listening connection; reconnecting");
                    break;
                }
            }
        }
    }
}

impl Placement<'_> {
    /// Sends `env` to node `to` and waits for its reply.
    pub(crate) async fn send_to(
        &self,
        to: &NodeId,
        conversation_id: Option<&tether_proto::ConversationId>,
        env: &Envelope,
    ) -> Result<Sent> {
        let cluster = self.cluster();
        let store = &self.rt.ctx().store;
        let id: CommandId = new_id();
        let body = serde_json::to_string(env).map_err(|e| RuntimeError::Internal(e.to_string()))?;
        let waiter = Waiter::new(cluster, &id);
        store
            .cluster()
            .submit_command(&NewCommand {
                id: id.clone(),
                to_node: to.clone(),
                from_node: cluster.node_id().clone(),
                conversation_id: conversation_id.cloned(),
                body,
                created_at_ms: self.rt.ctx().clock.now_ms(),
            })
            .await?;
        loop {
            let _ = tokio::time::timeout(POLL, waiter.notify.notified()).await;
            let Some(row) = store.cluster().get_command(&id).await? else {
                return Err(RuntimeError::Internal(format!(
                    "forwarded command {id} vanished before it was answered"
                )));
            };
            match row.status {
                CommandStatus::Answered => {
                    // Removed behind the caller's back: the answer does not wait for it.
                    let store = store.clone();
                    tokio::spawn(async move {
                        if let Err(e) = store.cluster().remove_command(&id).await {
                            tracing::warn!(command = %id, error = %e, "cannot remove a forwarded command");
                        }
                    });
                    let reply = row.reply.unwrap_or_default();
                    let reply = serde_json::from_str(&reply).map_err(|e| {
                        RuntimeError::Internal(format!("unreadable reply of node {to}: {e}"))
                    })?;
                    return Ok(Sent::Replied(reply));
                }
                CommandStatus::Pending if !self.node_alive(to).await? => {
                    if store.cluster().abandon_command(&id).await? {
                        self.forget_command(&id).await;
                        tracing::info!(
                            node = %to,
                            "its node died before taking a command: routing it again"
                        );
                        return Ok(Sent::Reroute);
                    }
                    // Taken a moment ago: look again.
                }
                CommandStatus::Taken if !self.node_alive(to).await? => {
                    self.forget_command(&id).await;
                    return Err(RuntimeError::OwnerLost { node: to.clone() });
                }
                CommandStatus::Abandoned => {
                    self.forget_command(&id).await;
                    return Ok(Sent::Reroute);
                }
                CommandStatus::Pending | CommandStatus::Taken => {}
            }
        }
    }

    async fn forget_command(&self, id: &str) {
        if let Err(e) = self.rt.ctx().store.cluster().remove_command(id).await {
            // Pruned later.
            tracing::warn!(command = id, error = %e, "cannot remove a forwarded command");
        }
    }

    /// Whether node `id`'s lease holds and it is not seen gone by its presence.
    async fn node_alive(&self, id: &str) -> Result<bool> {
        let now = self.rt.ctx().clock.now_ms();
        let ownership = &self.rt.ctx().ownership;
        Ok(self
            .rt
            .ctx()
            .store
            .cluster()
            .nodes()
            .await?
            .iter()
            .any(|n| {
                n.id == id && n.alive(now) && !ownership.seen_gone(&n.id, Some(n.started_at_ms))
            }))
    }

    /// Starts this node's worker (and its listener unless notices are off). Only on
    /// PostgreSQL: on SQLite there is no other node to send anything.
    pub(crate) fn start_cluster(&self) {
        if !self.cluster().enabled() {
            return;
        }
        let weak = Arc::downgrade(&self.rt.inner);
        tokio::spawn(worker(weak.clone()));
        if self.cluster().config.notices {
            tokio::spawn(listener(weak));
        } else {
            tracing::info!(
                "[cluster] notices = false: forwarded commands are found by polling only"
            );
        }
    }

    /// Runs command `row` (taken by this node) and stores its reply.
    async fn run_taken(&self, row: CommandRow) {
        let reply = match serde_json::from_str::<Envelope>(&row.body) {
            Ok(env) => WireReply::of(self.execute(env).await),
            Err(e) => WireReply::Err {
                code: tether_proto::ErrorCode::Internal,
                message: format!("unreadable forwarded command: {e}"),
            },
        };
        let stored = match serde_json::to_string(&reply) {
            Ok(json) => {
                self.rt
                    .ctx()
                    .store
                    .cluster()
                    .reply_command(&row.id, &json, self.rt.ctx().clock.now_ms())
                    .await
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a reply");
                return;
            }
        };
        match stored {
            Ok(true) => {}
            Ok(false) => tracing::info!(command = %row.id, "its sender gave the command up"),
            Err(e) => tracing::warn!(command = %row.id, error = %e, "cannot store a reply"),
        }
    }
}
