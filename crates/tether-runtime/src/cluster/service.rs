//! The placement service: [`Placement`], reached through `Runtime::placement()`, decides
//! where a call runs (`routed.rs`, `place.rs`) and forwards it (`forward.rs`); its state
//! is the [`Cluster`] (`mod.rs`).

use super::Cluster;

/// The placement service: where a call runs (here or on its conversation's owner) and the
/// forwarded commands. A view of the runtime (cheap, `Copy`), reached through
/// `Runtime::placement()`.
#[derive(Clone, Copy)]
pub(crate) struct Placement<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Placement<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Placement { rt }
    }

    /// The cluster's state: this node, the commands it waits for.
    pub(crate) fn cluster(self) -> &'a Cluster {
        &self.rt.inner.cluster
    }
}

impl Placement<'_> {
    /// The nodes serving this store, their leases and live conversations, and the channel
    /// leaders (`GET /api/v1/cluster`; on SQLite, this node only).
    pub(crate) async fn view(self) -> crate::error::Result<tether_proto::ClusterView> {
        use tether_proto::{LeaderView, NodeView};
        let ctx = self.rt.ctx();
        let (store, me) = (&ctx.store, self.cluster().node_id());
        let now = ctx.clock.now_ms();
        let nodes = store.cluster().nodes().await?;
        let owned = store.cluster().owner_counts().await?;
        let leaders = store.cluster().leaders().await?;
        let live_of = |id: &str| {
            owned
                .iter()
                .find(|(node, _)| node == id)
                .map_or(0, |(_, count)| *count)
        };
        Ok(tether_proto::ClusterView {
            node_id: me.clone(),
            store: store.backend_name().to_owned(),
            lease_ttl_ms: u64::try_from(self.cluster().config.lease_ttl.as_millis())
                .unwrap_or(u64::MAX),
            nodes: nodes
                .into_iter()
                .map(|n| NodeView {
                    live_conversations: live_of(&n.id),
                    alive: n.alive(now),
                    this_node: n.id == *me,
                    id: n.id,
                    name: n.name,
                    addr: n.addr,
                    started_at_ms: n.started_at_ms,
                    heartbeat_at_ms: n.heartbeat_at_ms,
                    lease_until_ms: n.lease_until_ms,
                    draining: n.draining_at_ms.is_some(),
                    version: n.version,
                })
                .collect(),
            leaders: leaders
                .into_iter()
                .map(|l| LeaderView {
                    alive: l.alive(now),
                    name: l.name,
                    node_id: l.node_id,
                    epoch: l.epoch,
                    claimed_at_ms: l.claimed_at_ms,
                })
                .collect(),
        })
    }

    /// Registers this node in the node registry and keeps its lease and presence until
    /// [`Membership::leave`](super::membership::Membership::leave).
    pub(crate) async fn join(
        self,
        addr: String,
    ) -> crate::error::Result<super::membership::Membership> {
        let ctx = self.rt.ctx();
        super::membership::Membership::join(super::membership::Joining {
            store: ctx.store.clone(),
            clock: ctx.clock.clone(),
            id: self.cluster().node_id().clone(),
            addr,
            ttl: self.cluster().config.lease_ttl,
            drain: ctx.drain.clone(),
        })
        .await
    }

    /// Starts following the other nodes' commits (events and list changes): `None` on
    /// SQLite, which is one node. Commit notices wake the followers unless `[cluster]
    /// notices = false`; the poll alone delivers too.
    pub(crate) async fn follow_other_nodes(
        self,
    ) -> crate::error::Result<Option<tether_store::TailHandle>> {
        let options = tether_store::TailOptions {
            notify: self.cluster().config.notices,
            ..tether_store::TailOptions::default()
        };
        Ok(self.rt.ctx().store.start_tail(options).await?)
    }
}
