//! A tether cluster for tests (issue 12): several real `tether serve` nodes on one
//! PostgreSQL database of their own, sharing one fake agent state directory (the shared
//! agent home), each with its own data directory, token and address.

use std::path::PathBuf;
use std::time::Duration;

use crate::postgres::TestDatabase;
use crate::{Daemon, DaemonOptions};

/// Nodes sharing one database and one agent home; everything is stopped on drop.
pub struct Cluster {
    /// The nodes, in the order they were started.
    pub nodes: Vec<Daemon>,
    /// The fake agents' shared state directory.
    pub agent_home: PathBuf,
    /// The shared database (kept for the cluster's life).
    pub database: TestDatabase,
    _home: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` nodes with `opts` (its `database_url` and `fake_state_dir` are the
    /// cluster's) one after the other, so each finds the schema migrated.
    pub async fn start(n: usize, opts: DaemonOptions) -> Cluster {
        let database = tokio::time::timeout(Duration::from_secs(120), TestDatabase::create())
            .await
            .unwrap_or_else(|_| panic!("timed out creating the cluster's database"))
            .unwrap_or_else(|e| panic!("cluster database: {e:#}"));
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let agent_home = home.path().join("agent-home");
        std::fs::create_dir_all(&agent_home).unwrap_or_else(|e| panic!("mkdir: {e}"));
        // One workspace too: a conversation's working directory exists on every node.
        let workspace = home.path().join("work");
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            let node_opts = DaemonOptions {
                database_url: Some(database.url.clone()),
                fake_state_dir: Some(agent_home.clone()),
                workspace_dir: Some(opts.workspace_dir.clone().unwrap_or(workspace.clone())),
                ..opts.clone()
            };
            nodes.push(Daemon::start(node_opts).await);
        }
        Cluster {
            nodes,
            agent_home,
            database,
            _home: home,
        }
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Daemon {
        &self.nodes[i]
    }

    /// Node `i`, to kill, pause or restart it.
    pub fn node_mut(&mut self, i: usize) -> &mut Daemon {
        &mut self.nodes[i]
    }
}
