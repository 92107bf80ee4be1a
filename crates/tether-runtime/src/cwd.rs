//! Working directories must exist, lie under a configured workspace root and outside
//! tether's own data directory (which holds the token, the database and the socket).
//! Checked when a directory is chosen ([`validate`]) and again right before every agent
//! start or resume ([`recheck`]): a directory that passed once may since have been
//! swapped for a symlink to somewhere else.

use std::path::{Path, PathBuf};

use tether_agents::AgentError;

use crate::{RuntimeConfig, RuntimeError};

/// Canonicalises `path` and checks it against the rules; the canonical path.
pub(crate) fn validate(path: &str, config: &RuntimeConfig) -> Result<String, RuntimeError> {
    check(path, config)
        .map(|p| p.display().to_string())
        .map_err(|reason| RuntimeError::InvalidCwd {
            path: path.to_string(),
            reason,
        })
}

/// The check of [`validate`] again, right before an agent starts in `cwd`; the canonical
/// path to start it in.
pub(crate) fn recheck(cwd: &Path, config: &RuntimeConfig) -> Result<PathBuf, AgentError> {
    let path = cwd.display().to_string();
    check(&path, config).map_err(|reason| AgentError::InvalidCwd { path, reason })
}

fn check(path: &str, config: &RuntimeConfig) -> Result<PathBuf, String> {
    if path.trim().is_empty() {
        return Err("it is empty".to_string());
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err("it must be an absolute path".to_string());
    }
    let canon = p
        .canonicalize()
        .map_err(|e| format!("it cannot be opened: {e}"))?;
    if !canon.is_dir() {
        return Err("it is not a directory".to_string());
    }
    let roots = &config.workspace_roots;
    let allowed = roots
        .iter()
        .filter_map(|r| r.canonicalize().ok())
        .any(|root| canon.starts_with(&root));
    if !allowed {
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(format!(
            "it is outside the workspace roots ({})",
            list.join(", ")
        ));
    }
    // The data directory may not exist yet (then nothing can lie inside it either).
    let data = config
        .data_dir
        .canonicalize()
        .unwrap_or_else(|_| config.data_dir.clone());
    if canon.starts_with(&data) {
        return Err(format!(
            "it lies in tether's data directory ({})",
            config.data_dir.display()
        ));
    }
    Ok(canon)
}

/// The workspace as `GET /api/v1/workspace` shows it.
pub(crate) fn workspace(config: &RuntimeConfig) -> tether_proto::Workspace {
    tether_proto::Workspace {
        roots: config
            .workspace_roots
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        default_cwd: config.default_cwd.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(root: &Path) -> RuntimeConfig {
        RuntimeConfig {
            agents: Default::default(),
            default_agent: "none".to_string(),
            workspace_roots: vec![root.to_path_buf()],
            default_cwd: root.to_path_buf(),
            data_dir: root.join("data"),
            private_paths: Vec::new(),
            approval_timeout: std::time::Duration::from_secs(60),
            queue_cap: 4,
            start_timeout: std::time::Duration::from_secs(5),
            turn_timeout: None,
            store_outage_limit: std::time::Duration::from_secs(300),
            pool: crate::PoolConfig::default(),
            delegation: crate::DelegationConfig::default(),
            coalesce: crate::CoalesceConfig::default(),
            attachments: crate::AttachmentLimits::default(),
            cluster: crate::ClusterConfig::default(),
            usage: crate::UsageConfig::default(),
            schedules: crate::SchedulesConfig::default(),
            worktrees: crate::WorktreesConfig::default(),
        }
    }

    #[test]
    fn cwd_rules() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("proj");
        std::fs::create_dir(&inside).unwrap();
        std::fs::create_dir_all(root.path().join("data/run")).unwrap();
        let cfg = config(root.path());
        let ok = validate(inside.to_str().unwrap(), &cfg).unwrap();
        assert!(ok.ends_with("proj"));
        let traversal = format!("{}/proj/../../..", root.path().display());
        assert!(validate(&traversal, &cfg).is_err());
        assert!(validate("relative/dir", &cfg).is_err());
        assert!(validate("/definitely/not/here", &cfg).is_err());
        assert!(validate("", &cfg).is_err());
        let data = root.path().join("data");
        assert!(validate(data.to_str().unwrap(), &cfg).is_err());
        assert!(validate(data.join("run").to_str().unwrap(), &cfg).is_err());
    }
}
