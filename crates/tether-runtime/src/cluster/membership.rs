//! This node in the store's node registry (issue 12): [`Membership::join`] registers the
//! node under its stable id, renews its lease every third of `[cluster] lease_ttl_secs`
//! and removes its row at [`Membership::leave`]; a node that dies without a goodbye is
//! gone once its lease runs out, or at once on PostgreSQL when its process died: the
//! node holds its presence lock (`tether_store::Presence`) for as long as it runs, and
//! the server frees it when the process's socket closes. Times come from the runtime's
//! clock. On SQLite the registry holds this node only.

use std::sync::Arc;
use std::time::Duration;

use tether_store::{NodeRow, Presence, Store, Topology};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::seams::Clock;

/// How often the presence connection is checked (and the lock taken, while a restarted
/// node's previous session still holds it).
const PRESENCE_CHECK: Duration = Duration::from_millis(500);

/// The running heartbeat of this node; [`Membership::leave`] removes it.
pub struct Membership {
    store: Store,
    id: tether_proto::NodeId,
    stop: CancellationToken,
    beats: tokio::task::JoinHandle<()>,
    presence: tokio::task::JoinHandle<()>,
}

/// What a node registers and keeps up to date.
pub(crate) struct Joining {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub id: tether_proto::NodeId,
    pub addr: String,
    pub ttl: Duration,
    /// Since when the node drains (issue 31), written with every registration.
    pub drain: crate::drain_mark::DrainMark,
}

impl Membership {
    /// Registers this node and starts its heartbeat.
    pub(crate) async fn join(j: Joining) -> Result<Membership> {
        let now = j.clock.now_ms();
        let node = NodeRow {
            id: j.id.clone(),
            name: host_name(),
            addr: j.addr,
            started_at_ms: now,
            heartbeat_at_ms: now,
            lease_until_ms: now + ttl_ms(j.ttl),
            draining_at_ms: j.drain.since(),
            version: tether_store::tether_version(),
        };
        let store = j.store;
        // Present before registered: the node never looks registered and dead.
        let presence = match store.cluster().hold_presence(&j.id).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hold this node's presence lock yet; retrying");
                None
            }
        };
        store.cluster().register_node(&node).await?;
        let stop = CancellationToken::new();
        let presence = tokio::spawn(keep_presence(
            store.clone(),
            j.id.clone(),
            presence,
            stop.clone(),
        ));
        let beats = tokio::spawn(heartbeat(
            store.clone(),
            j.clock,
            node,
            j.ttl,
            j.drain,
            stop.clone(),
        ));
        Ok(Membership {
            store,
            id: j.id,
            stop,
            beats,
            presence,
        })
    }

    /// Stops the heartbeat and removes this node's row.
    pub async fn leave(self) {
        self.stop.cancel();
        let _ = self.beats.await;
        let _ = self.presence.await;
        if let Err(e) = self.store.cluster().remove_node(&self.id).await {
            tracing::warn!(error = %e, "cannot remove this node from the registry");
        }
    }
}

/// Renews the lease every third of its length (so two missed beats still hold it); a
/// node whose row was removed registers again.
async fn heartbeat(
    store: Store,
    clock: Arc<dyn Clock>,
    node: NodeRow,
    ttl: Duration,
    drain: crate::drain_mark::DrainMark,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut trouble = tether_core::FailureRun::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = clock.now_ms();
        let until = now + ttl_ms(ttl);
        let renewed = match store.cluster().renew_node_lease(&node.id, now, until).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                let again = NodeRow {
                    heartbeat_at_ms: now,
                    lease_until_ms: until,
                    draining_at_ms: drain.since(),
                    ..node.clone()
                };
                store.cluster().register_node(&again).await
            }
            Err(e) => Err(e),
        };
        match renewed {
            Ok(()) => {
                if trouble.recover() > 0 {
                    tracing::info!("this node's lease is renewed again");
                }
            }
            Err(e) if trouble.fail() => {
                tracing::warn!(error = %e, "cannot renew this node's lease; retrying quietly");
            }
            Err(e) => tracing::debug!(error = %e, "cannot renew this node's lease"),
        }
    }
}

/// Keeps this node's presence lock held: checks its connection, and connects again when
/// it broke (on SQLite there is none to keep). Dropped at the end, which frees the lock.
async fn keep_presence(
    store: Store,
    id: tether_proto::NodeId,
    mut presence: Option<Presence>,
    stop: CancellationToken,
) {
    if store.topology() != Topology::Cluster {
        return;
    }
    let mut tick = tokio::time::interval(PRESENCE_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut trouble = tether_core::FailureRun::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let checked = match presence.as_mut() {
            Some(p) => p.renew().await.map(|_| ()),
            None => store
                .cluster()
                .hold_presence(&id)
                .await
                .map(|p| presence = p),
        };
        match checked {
            Ok(()) if presence.is_some() => {
                let failures = trouble.recover();
                if failures > 0 {
                    tracing::info!(failures, "this node's presence connection is back");
                }
            }
            Ok(()) => {}
            Err(e) => {
                if trouble.fail() {
                    tracing::warn!(error = %e, "this node's presence connection failed; connecting again");
                } else {
                    tracing::debug!(error = %e, "this node's presence connection failed again");
                }
                presence = None;
            }
        }
    }
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}
