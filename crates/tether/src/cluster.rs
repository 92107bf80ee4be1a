//! This node in the store's node registry (issue 12): `serve` registers the node (its id
//! is the daemon's instance id), renews its lease every third of `[cluster]
//! lease_ttl_secs` and removes its row when it stops; a node that dies without a goodbye
//! is gone once its lease runs out — or at once when its process died, on PostgreSQL: the
//! node holds its presence lock (`tether_store::Presence`) for as long as it runs, and the
//! server frees it when the process's socket closes. `GET /api/v1/cluster` lists the nodes and their
//! leases. On SQLite the registry holds this node only; on PostgreSQL, every node of the
//! cluster.
//!
//! ```toml
//! [cluster]
//! lease_ttl_secs = 10       # a node without a heartbeat for this long counts as gone
//! max_live_per_node = 0     # live conversations before new ones go elsewhere (0: no limit)
//! attachments_dir = "/shared/tether-attachments"  # attachment files, on storage every node mounts
//! ```

use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::extract::State;
use axum::{Json, Router, routing::get};
use serde::Deserialize;
use tether_proto::{ClusterView, LeaderView, NodeView};
use tether_store::{NodeRow, Store, TailHandle, TailOptions, now_ms};
use tokio_util::sync::CancellationToken;

/// The lease of a node that stops heart-beating (the issue's default).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// `[cluster]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub lease_ttl_secs: Option<u64>,
    pub max_live_per_node: Option<usize>,
    pub attachments_dir: Option<std::path::PathBuf>,
}

/// `[cluster]` as the daemon uses it (the node id comes from the data directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    pub lease_ttl: Duration,
    pub max_live_per_node: usize,
    /// Attachment files outside the data directory (`None`: in it).
    pub attachments_dir: Option<std::path::PathBuf>,
}

/// `[cluster]` → its settings.
pub fn settings(file: Option<ClusterFile>) -> Result<ClusterSettings> {
    let file = file.unwrap_or_default();
    let lease_ttl = match file.lease_ttl_secs {
        None => DEFAULT_LEASE_TTL,
        Some(0) => bail!("[cluster] lease_ttl_secs must be greater than 0"),
        Some(secs) => Duration::from_secs(secs),
    };
    if let Some(dir) = &file.attachments_dir
        && !dir.is_absolute()
    {
        bail!(
            "[cluster] attachments_dir must be an absolute path (got {})",
            dir.display()
        );
    }
    Ok(ClusterSettings {
        lease_ttl,
        max_live_per_node: file.max_live_per_node.unwrap_or(0),
        attachments_dir: file.attachments_dir,
    })
}

/// Turns the commit notices off when set to `1` (tests: the poll alone must deliver).
pub const NO_NOTIFY_ENV: &str = "TETHER_TEST_NO_NOTIFY";

/// Starts following the other nodes' commits (events and list changes; see
/// `tether_store::TailOptions`): `None` on SQLite, which is one node.
pub async fn follow_other_nodes(store: &Store) -> Result<Option<TailHandle>> {
    let options = TailOptions {
        notify: std::env::var(NO_NOTIFY_ENV).as_deref() != Ok("1"),
        ..TailOptions::default()
    };
    store
        .start_tail(options)
        .await
        .context("cannot follow the other nodes' commits")
}

/// The running heartbeat of this node; [`Membership::leave`] removes it.
pub struct Membership {
    store: Store,
    id: String,
    stop: CancellationToken,
    beats: tokio::task::JoinHandle<()>,
    presence: tokio::task::JoinHandle<()>,
}

impl Membership {
    /// Registers this node and starts its heartbeat.
    pub async fn join(store: Store, id: String, addr: String, ttl: Duration) -> Result<Self> {
        let now = now_ms();
        let node = NodeRow {
            id: id.clone(),
            name: host_name(),
            addr,
            started_at_ms: now,
            heartbeat_at_ms: now,
            lease_until_ms: now + ttl_ms(ttl),
        };
        // Present before registered: the node never looks registered and dead.
        let presence = match store.hold_presence(&id).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hold this node's presence lock yet; retrying");
                None
            }
        };
        store
            .register_node(&node)
            .await
            .context("cannot register this node in the store")?;
        let stop = CancellationToken::new();
        let presence = tokio::spawn(keep_presence(
            store.clone(),
            id.clone(),
            presence,
            stop.clone(),
        ));
        let beats = tokio::spawn(heartbeat(store.clone(), node, ttl, stop.clone()));
        Ok(Membership {
            store,
            id,
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
        if let Err(e) = self.store.remove_node(&self.id).await {
            tracing::warn!(error = %e, "cannot remove this node from the registry");
        }
    }
}

/// Renews the lease every third of its length (so two missed beats still hold it); a
/// node whose row was removed registers again.
async fn heartbeat(store: Store, node: NodeRow, ttl: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut trouble = tether_core::FailureRun::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = now_ms();
        let until = now + ttl_ms(ttl);
        let renewed = match store.renew_node_lease(&node.id, now, until).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                let again = NodeRow {
                    heartbeat_at_ms: now,
                    lease_until_ms: until,
                    ..node.clone()
                };
                store.register_node(&again).await
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

/// How often the presence connection is checked (and the lock taken, while a restarted
/// node's previous session still holds it).
const PRESENCE_CHECK: Duration = Duration::from_millis(500);

/// Keeps this node's presence lock held: checks its connection, and connects again when
/// it broke (on SQLite there is none to keep). Dropped at the end, which frees the lock.
async fn keep_presence(
    store: Store,
    id: String,
    mut presence: Option<tether_store::Presence>,
    stop: CancellationToken,
) {
    if store.topology() != tether_store::Topology::Cluster {
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
            None => store.hold_presence(&id).await.map(|p| presence = p),
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

#[derive(Clone)]
struct ClusterState {
    store: Store,
    node_id: String,
    ttl: Duration,
}

/// `GET /api/v1/cluster` (behind the token).
pub fn routes(store: Store, node_id: String, ttl: Duration) -> Router {
    Router::new()
        .route("/api/v1/cluster", get(cluster))
        .with_state(ClusterState {
            store,
            node_id,
            ttl,
        })
}

/// The nodes serving this store and their leases.
#[utoipa::path(
    get,
    path = "/api/v1/cluster",
    tag = "meta",
    responses((status = 200, description = "The nodes and their leases", body = ClusterView)),
    security(("bearer" = []))
)]
async fn cluster(
    State(s): State<ClusterState>,
) -> Result<Json<ClusterView>, tether_server::ApiError> {
    let now = now_ms();
    let failed = |e: tether_store::StoreError| {
        tether_server::ApiError::new(tether_proto::ErrorCode::Internal, e.to_string())
    };
    let nodes = s.store.nodes().await.map_err(failed)?;
    let owned = s.store.owner_counts().await.map_err(failed)?;
    let leaders = s.store.leaders().await.map_err(failed)?;
    Ok(Json(ClusterView {
        node_id: s.node_id.clone(),
        store: s.store.backend_name().to_owned(),
        lease_ttl_ms: u64::try_from(s.ttl.as_millis()).unwrap_or(u64::MAX),
        nodes: nodes
            .into_iter()
            .map(|n| NodeView {
                live_conversations: owned
                    .iter()
                    .find(|(id, _)| *id == n.id)
                    .map_or(0, |(_, count)| *count),
                alive: n.alive(now),
                this_node: n.id == s.node_id,
                id: n.id,
                name: n.name,
                addr: n.addr,
                started_at_ms: n.started_at_ms,
                heartbeat_at_ms: n.heartbeat_at_ms,
                lease_until_ms: n.lease_until_ms,
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
    }))
}

/// `doctor`'s view of the nodes, as the running daemon at `base` lists them.
pub async fn doctor_report(base: &str, token: &str) -> String {
    let listed = async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let resp = client
            .get(format!("{base}/api/v1/cluster"))
            .bearer_auth(token)
            .send()
            .await
            .ok()?;
        resp.json::<ClusterView>().await.ok()
    };
    let Some(view) = listed.await else {
        return "\ncluster:\n  daemon did not answer /api/v1/cluster\n".to_owned();
    };
    let now = now_ms();
    let mut out = format!(
        "\ncluster ({} store, lease {} ms):\n",
        view.store, view.lease_ttl_ms
    );
    for n in &view.nodes {
        let state = if n.alive {
            format!("up, lease {} ms left", n.lease_until_ms - now)
        } else {
            format!("gone {} s ago", (now - n.lease_until_ms) / 1000)
        };
        let this = if n.this_node { " (this daemon)" } else { "" };
        out.push_str(&format!(
            "  {} {} at {}: {state}, {} live conversations{this}\n",
            n.id, n.name, n.addr, n.live_conversations
        ));
    }
    for l in &view.leaders {
        let state = if l.alive {
            ""
        } else {
            " (gone: the next node takes it)"
        };
        out.push_str(&format!("  {} led by {}{state}\n", l.name, l.node_id));
    }
    out
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(cluster), components(schemas(ClusterView, NodeView, LeaderView)))]
struct ClusterDoc;

/// The route's part of the OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    ClusterDoc::openapi()
}
