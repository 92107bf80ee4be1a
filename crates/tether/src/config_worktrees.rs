//! `[worktrees]` of the config file (issue 32): isolated git worktrees.
//!
//! ```toml
//! [worktrees]
//! isolate_roots = ["/home/me/src/app"]   # conversations under these start isolated
//! setup = "npm ci"                       # run in a new worktree before its first turn
//! setup_timeout_secs = 600               # the set-up's limit (the turn does not start past it)
//! archive_grace_secs = 604800            # an archived conversation's worktree goes after this
//! disk_budget_mb = 20480                 # past it, idle worktrees go (snapshot kept)
//! sweep_interval_secs = 3600             # how often one node cleans up
//! sweep_idle_secs = 900                  # unused this long, a worktree may go for the budget
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_runtime::WorktreesConfig;

/// `[worktrees]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreesFile {
    pub isolate_roots: Option<Vec<PathBuf>>,
    pub setup: Option<String>,
    pub setup_timeout_secs: Option<u64>,
    pub archive_grace_secs: Option<u64>,
    pub disk_budget_mb: Option<u64>,
    pub sweep_interval_secs: Option<u64>,
    pub sweep_idle_secs: Option<u64>,
}

pub fn resolve(file: Option<WorktreesFile>) -> Result<WorktreesConfig> {
    let file = file.unwrap_or_default();
    let defaults = WorktreesConfig::default();
    let mut roots = Vec::new();
    for r in file.isolate_roots.unwrap_or_default() {
        if !r.is_absolute() {
            bail!(
                "[worktrees] isolate_roots: {} is not an absolute path",
                r.display()
            );
        }
        // Compared with canonical working directories.
        roots.push(r.canonicalize().unwrap_or(r));
    }
    let setup = file.setup.filter(|s| !s.trim().is_empty());
    let setup_timeout = match file.setup_timeout_secs {
        None => defaults.setup_timeout,
        Some(0) => bail!("[worktrees] setup_timeout_secs must be greater than 0"),
        Some(s) => Duration::from_secs(s),
    };
    let sweep_interval = match file.sweep_interval_secs {
        None => defaults.sweep_interval,
        Some(0) => bail!("[worktrees] sweep_interval_secs must be greater than 0"),
        Some(s) => Duration::from_secs(s),
    };
    Ok(WorktreesConfig {
        isolate_roots: roots,
        setup,
        setup_timeout,
        archive_grace: file
            .archive_grace_secs
            .map_or(defaults.archive_grace, Duration::from_secs),
        disk_budget_bytes: file
            .disk_budget_mb
            .map_or(defaults.disk_budget_bytes, |mb| mb.saturating_mul(1 << 20)),
        sweep_interval,
        sweep_idle: file
            .sweep_idle_secs
            .map_or(defaults.sweep_idle, Duration::from_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_roots_and_a_zero_time_out_are_refused() {
        let rel = WorktreesFile {
            isolate_roots: Some(vec![PathBuf::from("src")]),
            ..Default::default()
        };
        assert!(resolve(Some(rel)).is_err());
        let zero = WorktreesFile {
            setup_timeout_secs: Some(0),
            ..Default::default()
        };
        assert!(resolve(Some(zero)).is_err());
        let never = WorktreesFile {
            sweep_interval_secs: Some(0),
            ..Default::default()
        };
        assert!(resolve(Some(never)).is_err());
        let ok = resolve(None).unwrap();
        assert!(ok.setup.is_none() && ok.isolate_roots.is_empty());
    }
}
