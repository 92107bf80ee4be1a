//! The runtime's state and its start-up. [`Runtime`] is a handle on [`Inner`]: the
//! shared context and the services' own state (the router's actors and locks, the
//! cluster's placement state); its methods are all in `api.rs`. Start-up: recovery first (open turns interrupted, pending requests expired, sessions
//! dormant; on PostgreSQL only what this node owned and orphans), then the context, the
//! services' state and the background work (failover sweep, pool sweep, delegation
//! watch, forwarded-command worker, warm spares).

use std::sync::Arc;

use tether_store::Store;

use crate::ctx::Ctx;
use crate::error::Result;
use crate::{RuntimeConfig, Seams};

/// Cheap to clone; all clones share one runtime.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
    /// The person this handle acts for (`Runtime::acting_as`): its reads are checked and
    /// its calls carry them. `None`: tether's own handle, trusted.
    pub(crate) who: Option<Arc<crate::call::Identity>>,
}

/// A handle on `inner` acting for `who` (`Runtime::acting_as`, `Runtime::trusted`).
pub(crate) fn handle(inner: &Arc<Inner>, who: Option<crate::call::Identity>) -> Runtime {
    Runtime {
        inner: inner.clone(),
        who: who.map(Arc::new),
    }
}

pub(crate) struct Inner {
    pub ctx: Arc<Ctx>,
    /// The session actors and the routing locks.
    pub router: crate::session::router_state::RouterState,
    /// Where commands run when other nodes share the store (issue 12).
    pub cluster: crate::cluster::Cluster,
    /// The install's first enabled owner: whom the bootstrap token stands for, and whose
    /// are the conversations nobody else started (issue 28).
    pub owner: tether_store::PersonRow,
}

/// Opens the runtime on `store` (see `Runtime::start_with`).
pub(crate) async fn start(config: RuntimeConfig, store: Store, seams: Seams) -> Result<Runtime> {
    // One clock: what the store records as `created_at` and the like is the runtime's time.
    store.set_clock(seams.clock.clone());
    let records = crate::ctx::end_leftover_agents(&config);
    crate::attachments::blobs::Blobs::of(&config).tighten();
    // SQLite: the whole store; PostgreSQL: only what this node owned and orphans.
    let report = crate::ownership::failover::recover_at_start(
        &store,
        &config.cluster.node_id,
        seams.clock.as_ref(),
    )
    .await?;
    if !report.conversations.is_empty() || report.sessions_made_dormant > 0 {
        tracing::info!(
            conversations = report.conversations.len(),
            sessions = report.sessions_made_dormant,
            "recovered after restart"
        );
    }
    // The install's owner (made on first start: an upgraded single-token install's token
    // stands for them), and the conversations of before people existed are theirs.
    let owner = store
        .people()
        .ensure_owner(&tether_proto::PersonId::from("owner"), "owner")
        .await?;
    let adopted = store.conversations().adopt_unowned(&owner.id).await?;
    if adopted > 0 {
        tracing::info!(adopted, owner = %owner.id, "gave the conversations of before people to the owner");
    }
    let cluster = crate::cluster::Cluster::new(config.cluster.clone(), &store);
    let ctx = Ctx::new(store, config, records, seams);
    if ctx.ownership.clustered() {
        crate::ownership::failover::start_sweep(
            Arc::downgrade(&ctx),
            ctx.config.cluster.node_id.clone(),
            ctx.config.cluster.lease_ttl,
        );
    }
    if let Some(every) = ctx.pool.sweep_interval() {
        let weak = Arc::downgrade(&ctx);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(ctx) => ctx.pool.sweep(),
                    None => return,
                }
            }
        });
    }
    let rt = Runtime {
        inner: Arc::new(Inner {
            ctx,
            router: crate::session::router_state::RouterState::new(),
            cluster,
            owner,
        }),
        who: None,
    };
    rt.delegations().start_delegation_watch();
    rt.usage().start_timers();
    rt.placement().start_cluster();
    rt.ctx().spares.fill();
    Ok(rt)
}
