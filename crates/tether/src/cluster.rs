//! `[cluster]` as written and as the daemon uses it, and `doctor`'s view of the nodes.
//! This node's membership (lease, heartbeat, presence), the node registry and the
//! cluster view are the runtime's (`tether_runtime::Membership`, `Runtime::cluster_view`);
//! `GET /api/v1/cluster` is served by `tether-server`.
//!
//! ```toml
//! [cluster]
//! lease_ttl_secs = 10       # a node without a heartbeat for this long counts as gone
//! max_live_per_node = 0     # live conversations before new ones go elsewhere (0: no limit)
//! attachments_dir = "/shared/tether-attachments"  # attachment files, on storage every node mounts
//! notices = true            # wake the nodes with commit notices (false: polling alone)
//! ```

use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_proto::ClusterView;
use tether_store::now_ms;

/// The lease of a node that stops heart-beating (the issue's default).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// `[cluster]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub lease_ttl_secs: Option<u64>,
    pub max_live_per_node: Option<usize>,
    pub attachments_dir: Option<std::path::PathBuf>,
    pub notices: Option<bool>,
}

/// `[cluster]` as the daemon uses it (the node id comes from the data directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    pub lease_ttl: Duration,
    pub max_live_per_node: usize,
    /// Attachment files outside the data directory (`None`: in it).
    pub attachments_dir: Option<std::path::PathBuf>,
    /// Whether the nodes wake each other with commit notices (off: polling alone).
    pub notices: bool,
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
        notices: file.notices.unwrap_or(true),
    })
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
