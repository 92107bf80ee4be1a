//! A tether cluster for tests (issue 12): several real `tether serve` nodes on one
//! PostgreSQL database of their own, sharing one fake agent state directory (the shared
//! agent home) and one workspace root (as nodes share a file system), each with its own
//! data directory, token and address.

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
    /// The shared workspace root (every node's default cwd).
    pub work_dir: PathBuf,
    /// The shared database (kept for the cluster's life).
    pub database: TestDatabase,
    _home: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` nodes with `opts` one after the other, so each finds the schema migrated.
    /// `{node}` in `extra_config` is each node's index. Its `database_url` is the cluster's; `fake_state_dir` and `work_dir` are the
    /// cluster's shared ones unless `opts` names its own.
    pub async fn start(n: usize, opts: DaemonOptions) -> Cluster {
        let database = tokio::time::timeout(Duration::from_secs(120), TestDatabase::create())
            .await
            .unwrap_or_else(|_| panic!("timed out creating the cluster's database"))
            .unwrap_or_else(|e| panic!("cluster database: {e:#}"));
        Self::start_with(n, opts, database).await
    }

    /// [`Cluster::start`] on a database of its own on the server at `admin_url` (a test
    /// that restarts that server).
    pub async fn start_on(n: usize, opts: DaemonOptions, admin_url: &str) -> Cluster {
        let database =
            tokio::time::timeout(Duration::from_secs(60), TestDatabase::create_on(admin_url))
                .await
                .unwrap_or_else(|_| panic!("timed out creating the cluster's database"))
                .unwrap_or_else(|e| panic!("cluster database: {e:#}"));
        Self::start_with(n, opts, database).await
    }

    async fn start_with(n: usize, opts: DaemonOptions, database: TestDatabase) -> Cluster {
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let agent_home = home.path().join("agent-home");
        let work_dir = home.path().join("work");
        for dir in [&agent_home, &work_dir] {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
        }
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let node_opts = DaemonOptions {
                database_url: Some(database.url.clone()),
                fake_state_dir: opts.fake_state_dir.clone().or(Some(agent_home.clone())),
                work_dir: opts.work_dir.clone().or(Some(work_dir.clone())),
                // `{node}` in the configuration names the node (its index).
                extra_config: opts.extra_config.replace("{node}", &i.to_string()),
                ..opts.clone()
            };
            nodes.push(Daemon::start(node_opts).await);
        }
        Cluster {
            nodes,
            agent_home,
            work_dir,
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
