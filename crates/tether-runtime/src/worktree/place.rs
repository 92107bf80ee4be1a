//! Where a worktree goes, what is copied into it and its set-up (issue 32).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tether_proto::ConversationId;

use super::git;
use crate::RuntimeConfig;
use crate::error::Result;

/// The worktree directory of conversation `id` in the repository at `repo`: beside it
/// when its parent lies in a workspace root, else in its git directory (never inside the
/// checkout, where it would show as untracked files).
pub(crate) async fn worktree_dir(
    repo: &Path,
    id: &ConversationId,
    config: &RuntimeConfig,
) -> Result<PathBuf> {
    let name = format!(
        "{}-{}",
        repo.file_name()
            .map_or("repo".into(), |n| n.to_string_lossy().into_owned()),
        super::short(id)
    );
    let parent_in_root = repo
        .parent()
        .is_some_and(|p| config.workspace_roots.iter().any(|r| p.starts_with(r)));
    if let (true, Some(parent)) = (parent_in_root, repo.parent()) {
        // A task's worktree of a worktree goes beside it, not a level deeper.
        if parent.file_name().is_some_and(|n| n == ".tether-worktrees") {
            return Ok(parent.join(name));
        }
        return Ok(parent.join(".tether-worktrees").join(name));
    }
    let common = git::git(
        repo,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        &[],
    )
    .await?;
    Ok(PathBuf::from(common.trim())
        .join("tether-worktrees")
        .join(name))
}

/// Copies the files `.worktreeinclude` lists (one path relative to the repository per
/// line; `#` comments; no `..`) from the repository into the worktree — files git does
/// not carry, such as `.env`. How many were copied.
pub(crate) fn copy_included(repo: &Path, worktree: &Path) -> usize {
    let Ok(list) = std::fs::read_to_string(repo.join(".worktreeinclude")) else {
        return 0;
    };
    let mut n = 0;
    for line in list.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.split('/').any(|p| p == "..") {
            continue;
        }
        let (from, to) = (repo.join(line), worktree.join(line));
        if !from.is_file() || to.exists() {
            continue;
        }
        if let Some(parent) = to.parent()
            && std::fs::create_dir_all(parent).is_ok()
            && std::fs::copy(&from, &to).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// A repository with submodules: they are initialised in the new worktree (from what
/// the repository has, or their URLs); a line saying how it went (`None`: none).
pub(crate) async fn init_submodules(worktree: &Path) -> Option<String> {
    if !worktree.join(".gitmodules").exists() {
        return None;
    }
    Some(
        match git::git(
            worktree,
            &["submodule", "update", "--init", "--recursive"],
            &[],
        )
        .await
        {
            Ok(_) => "Its submodules were initialised.".to_owned(),
            Err(e) => format!(
                "⚠️ Its submodules could not be initialised ({e}); the agent works without them"
            ),
        },
    )
}

/// How the set-up command went.
pub(crate) enum Setup {
    None,
    /// Its output's last lines.
    Done(String),
    /// Why not (its exit, its output's last lines, or the time-out).
    Failed(String),
}

/// Runs `[worktrees] setup` in the new worktree (`sh -c`, in its own process group,
/// within `setup_timeout`).
pub(crate) async fn run_setup(dir: &Path, config: &RuntimeConfig) -> Setup {
    let Some(command) = config.worktrees.setup.as_deref() else {
        return Setup::None;
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let timeout = config.worktrees.setup_timeout;
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Setup::Failed(format!("cannot run `{command}`: {e}")),
    };
    let group = child.id().and_then(|p| i32::try_from(p).ok());
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => {
            // The whole group: what the command started goes with it.
            if let Some(g) = group {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(g),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Setup::Failed(format!(
                "`{command}` did not finish within {} s",
                timeout.as_secs()
            ))
        }
        Ok(Err(e)) => Setup::Failed(format!("cannot run `{command}`: {e}")),
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let tail = last_lines(&text, 20);
            if out.status.success() {
                Setup::Done(tail)
            } else {
                Setup::Failed(format!("`{command}` exited with {}:\n{tail}", out.status))
            }
        }
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// One lock per repository on this node: two merges into one checkout take turns (git's
/// own index lock refuses the second across nodes).
pub(crate) fn repo_lock(repo: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<std::collections::HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> =
        OnceLock::new();
    let locks = LOCKS.get_or_init(Default::default);
    let mut map = locks.lock().unwrap_or_else(|e| e.into_inner());
    map.entry(repo.to_path_buf()).or_default().clone()
}
