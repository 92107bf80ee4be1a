//! Where a command runs: on SQLite here; the owner's when its lease holds (here if it is
//! this node); an unowned conversation is claimed here unless this node owns
//! `max_live_per_node` conversations already, then it goes to the least-loaded live
//! node, which claims it. A command forwarded here claims whatever the cap says (the
//! sender decided), so a conversation never bounces between full nodes.
//!
//! A conversation whose owner died is left to failover (a survivor takes it over,
//! recovers its turns and releases it) for up to a lease before it is claimed here.

use std::time::Duration;

use tether_core::placement::{self, Verdict};
use tether_proto::ConversationId;
use tether_store::Claim;

use crate::cluster::service::Placement;
use crate::error::Result;

/// Where a command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// Here; `claimed`: this command made this node the owner.
    Here { claimed: bool },
    /// On that node.
    There(tether_proto::NodeId),
}

/// How often a dead owner's conversation is looked at while failover runs.
const FAILOVER_LOOK: Duration = Duration::from_millis(100);

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

impl Placement<'_> {
    /// Decides where a command of conversation `id` runs. `forwarded`: it was sent here
    /// by another node (no cap: this node was chosen).
    /// `trust_claim`: when something here holds the conversation's claim, here without
    /// reading its owners row; for a command that claims before it writes anything
    /// (its claim is the one round trip that checks; lost meanwhile, it is placed again
    /// with `trust_claim` off, see `routed`).
    pub(crate) async fn place(
        &self,
        id: &ConversationId,
        forwarded: bool,
        trust_claim: bool,
    ) -> Result<Place> {
        // Not while draining: a draining node places by the owners row (a claim still
        // held by an actor on its way out must not take new work here).
        if trust_claim && !self.rt.ops().draining() && self.rt.ctx().ownership.in_use(id) {
            return Ok(Place::Here { claimed: false });
        }
        let cluster = self.cluster();
        let me = cluster.node_id();
        let store = &self.rt.ctx().store;
        let failover_until = self.rt.ctx().clock.now_ms() + ttl_ms(cluster.config.lease_ttl);
        loop {
            let now = self.rt.ctx().clock.now_ms();
            let row = store.cluster().conversation_owner(id).await?;
            let owner = row.as_ref().map(|o| placement::Owner {
                node_id: &o.node_id,
                lease_until_ms: o.lease_until_ms,
                seen_gone: self
                    .rt
                    .ctx()
                    .ownership
                    .seen_gone(&o.node_id, o.node_started_at_ms),
            });
            match placement::verdict(me, owner, now, failover_until) {
                Verdict::Mine => return Ok(Place::Here { claimed: false }),
                Verdict::There(node) => return Ok(Place::There(node.into())),
                Verdict::AwaitFailover => {
                    tracing::debug!(conversation = %id, "the owner is gone: waiting for failover");
                    tokio::time::sleep(FAILOVER_LOOK).await;
                    continue;
                }
                Verdict::Claim => {}
            }
            // A draining node claims nothing new (issue 31): the least-loaded node that
            // takes work does, else nobody.
            if self.rt.ops().draining() {
                return match self.least_loaded_other().await? {
                    Some(node) => Ok(Place::There(node)),
                    None => Err(crate::RuntimeError::Draining),
                };
            }
            if !forwarded && let Some(node) = self.elsewhere_at_cap().await? {
                return Ok(Place::There(node));
            }
            return Ok(
                match store.cluster().claim_conversation(id, me, now).await? {
                    Claim::Claimed { .. } => Place::Here { claimed: true },
                    Claim::Held { .. } => Place::Here { claimed: false },
                    // Another node claimed it a moment ago.
                    Claim::Owned(o) => Place::There(o.node_id),
                },
            );
        }
    }

    /// The live node other than this one that takes work and owns the fewest
    /// conversations (`None`: there is none).
    pub(super) async fn least_loaded_other(&self) -> Result<Option<tether_proto::NodeId>> {
        let cluster = self.cluster();
        let store = &self.rt.ctx().store;
        let counts = store.cluster().owner_counts().await?;
        let now = self.rt.ctx().clock.now_ms();
        let nodes = store.cluster().nodes().await?;
        Ok(nodes
            .into_iter()
            .filter(|n| {
                n.takes_work(now)
                    && n.id != *cluster.node_id()
                    && !self
                        .rt
                        .ctx()
                        .ownership
                        .seen_gone(&n.id, Some(n.started_at_ms))
            })
            .min_by_key(|n| {
                counts
                    .iter()
                    .find(|(id, _)| id.as_str() == n.id.as_str())
                    .map_or(0, |(_, c)| *c)
            })
            .map(|n| n.id))
    }

    /// When this node owns `max_live_per_node` conversations or more: the live node that
    /// owns the fewest (`None`: no cap, not at it, or this node is the least loaded).
    async fn elsewhere_at_cap(&self) -> Result<Option<tether_proto::NodeId>> {
        let cluster = self.cluster();
        let cap = cluster.config.max_live_per_node;
        if cap == 0 {
            return Ok(None);
        }
        let store = &self.rt.ctx().store;
        let counts = store.cluster().owner_counts().await?;
        let owned = |node: &str| {
            counts
                .iter()
                .find(|(n, _)| n == node)
                .map_or(0, |(_, c)| *c)
        };
        let mine = owned(cluster.node_id());
        if !placement::at_cap(cap, mine) {
            // No need to read the nodes.
            return Ok(None);
        }
        let now = self.rt.ctx().clock.now_ms();
        let nodes = store.cluster().nodes().await?;
        let others = nodes
            .iter()
            .filter(|n| {
                n.takes_work(now)
                    && n.id != *cluster.node_id()
                    && !self
                        .rt
                        .ctx()
                        .ownership
                        .seen_gone(&n.id, Some(n.started_at_ms))
            })
            .map(|n| (n.id.as_str(), owned(&n.id)));
        Ok(placement::elsewhere_at_cap(cap, mine, others).map(tether_proto::NodeId::from))
    }
}
