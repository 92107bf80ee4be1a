//! Work that runs once per cluster (issue 12): a channel's long-lived connection
//! (Telegram polling, the Feishu long connection, Slack Socket Mode, the Discord
//! Gateway), its event pump, its outbox and its sweep run on the node that holds the
//! channel's leader lease (`channel:<name>` in the store's `leaders` table). Every node
//! runs [`lead`] for every channel; the one that leads starts the work, the others wait
//! and take over once the leader's node lease ends — or, when the leader's process died
//! (its presence lock is free for [`LOOKS`] looks in a row, half a second apart), at
//! once, the way conversations move (issue 33). Webhooks need none of this: every node
//! accepts them.
//!
//! On SQLite the store has one node: the work starts at once, with no lease and no
//! timer (a single node pays nothing for the cluster).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_store::{LeaderClaim, LeaderRow, Store, now_ms};
use tokio::task::JoinHandle;

/// This node, as the leader leases know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's id in the store's `nodes` table (its lease is the leader's lease).
    pub id: String,
    /// How long a node lease lasts without a heartbeat.
    pub lease_ttl: Duration,
}

impl Default for ClusterNode {
    fn default() -> Self {
        ClusterNode {
            id: "local".to_owned(),
            lease_ttl: Duration::from_secs(10),
        }
    }
}

/// How often a node that does not lead looks at the leader's presence.
const LOOK: Duration = Duration::from_millis(500);
/// Looks in a row that find the leader's presence lock free before it counts as gone
/// (a node reconnecting holds it again well within them).
const LOOKS: u32 = 3;

/// Starts the work of one leadership term (called again for every term).
pub(crate) type Start = Arc<dyn Fn() -> Vec<JoinHandle<()>> + Send + Sync>;

/// A term's tasks: dropping it ends them.
struct Term(Vec<JoinHandle<()>>);

impl Drop for Term {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Set when the node drains (issue 31): every lease it leads is handed over.
pub(crate) type Resign = tokio::sync::watch::Receiver<bool>;

/// Resolves once the node drains.
async fn resigned(resign: &mut Resign) {
    let _ = resign.wait_for(|r| *r).await.map(|_| ());
}

/// Runs `start`'s work while this node leads `name`; aborting the returned task ends it.
pub(crate) fn lead(
    store: Store,
    node: ClusterNode,
    name: String,
    start: Start,
    resign: Resign,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // SQLite: one store, one node; nobody to share the work with (nor to hand it to
        // while the node drains: it works until it stops).
        if store.topology() == tether_store::Topology::Single {
            let _term = Term(start());
            std::future::pending::<()>().await;
        }
        hold(store, node, name, start, resign).await;
    })
}

/// Claims the lease every third of a lease (the heartbeat's pace), starts the work when
/// the lease is won and stops it when another node leads; when the node drains, stops
/// the work, gives the lease up (another node claims it at its next look) and claims no
/// more.
async fn hold(store: Store, node: ClusterNode, name: String, start: Start, mut resign: Resign) {
    let ttl = node.lease_ttl;
    let every = ttl / 3;
    let mut tick = tokio::time::interval(every.min(LOOK));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut term: Option<Term> = None;
    let mut held_epoch: Option<i64> = None;
    let mut confirmed = Instant::now();
    let mut last_claim: Option<Instant> = None;
    // Another node leads: which, and how many looks in a row found it gone.
    let mut led_by: Option<LeaderRow> = None;
    let mut absent = 0u32;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = resigned(&mut resign) => {
                drop(term.take());
                if let Some(epoch) = held_epoch {
                    match store.cluster().release_leader(&name, &node.id, epoch).await {
                        Ok(_) => tracing::info!(lease = name, "draining: leadership handed over"),
                        Err(e) => tracing::warn!(lease = name, "cannot give the leader lease up; it ends with this node's: {e}"),
                    }
                }
                return;
            }
        }
        // Not confirmed for a whole lease (this process was paused, or the database was
        // out of reach): another node may lead by now, so stop before anything else runs.
        if term.is_some() && confirmed.elapsed() >= ttl {
            tracing::warn!(
                lease = name,
                "leadership not confirmed for a lease; stopping"
            );
            term = None;
        }
        if let Some(leader) = &led_by {
            match store.cluster().node_present(&leader.node_id).await {
                Ok(false) => absent += 1,
                Ok(true) | Err(_) => absent = 0,
            }
            if absent >= LOOKS {
                absent = 0;
                match store
                    .cluster()
                    .take_leader(&name, &node.id, &leader.node_id, leader.epoch, now_ms())
                    .await
                {
                    Ok(Some(epoch)) => {
                        tracing::info!(lease = name, epoch, gone = %leader.node_id,
                            "the leader's node is gone (its presence lock is free): this node leads; starting");
                        led_by = None;
                        confirmed = Instant::now();
                        last_claim = Some(confirmed);
                        held_epoch = Some(epoch);
                        term = Some(Term(start()));
                        continue;
                    }
                    // It moved meanwhile: the claim below says to whom.
                    Ok(None) => last_claim = None,
                    Err(e) => {
                        tracing::warn!(lease = name, "cannot take the leader lease over: {e}")
                    }
                }
            }
        }
        // Claims (which renew a held lease) every third of a lease.
        if last_claim.is_some_and(|at| at.elapsed() < every) {
            continue;
        }
        last_claim = Some(Instant::now());
        match store
            .cluster()
            .claim_leader(&name, &node.id, now_ms())
            .await
        {
            Ok(LeaderClaim::Claimed { epoch } | LeaderClaim::Held { epoch }) => {
                confirmed = Instant::now();
                held_epoch = Some(epoch);
                led_by = None;
                if term.is_none() {
                    tracing::info!(lease = name, epoch, "this node leads; starting");
                    term = Some(Term(start()));
                }
            }
            Ok(LeaderClaim::Led(leader)) => {
                held_epoch = None;
                if led_by.as_ref().is_none_or(|l| l.node_id != leader.node_id) {
                    absent = 0;
                }
                led_by = Some(leader.clone());
                if term.take().is_some() {
                    tracing::warn!(
                        lease = name,
                        leader = %leader.node_id,
                        "another node leads now; stopped"
                    );
                }
            }
            Err(e) => tracing::warn!(lease = name, "cannot claim the leader lease: {e}"),
        }
    }
}
