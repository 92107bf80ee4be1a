//! git as tether drives it for isolated worktrees (issue 32): each operation is one or a
//! few `git` commands in a directory, with a time-out, never a shell. Snapshots write a
//! commit of a worktree's whole state (tracked changes and untracked files that are not
//! ignored) through a temporary index, so neither the worktree's index nor any branch
//! moves; only the snapshot ref does.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one git command may take (a worktree of a large repository included).
pub(crate) const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// What went wrong with git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{dir} is not inside a git repository (isolation needs git)")]
    NotARepo { dir: String },
    #[error("git {cmd} failed: {stderr}")]
    Failed { cmd: String, stderr: String },
    #[error("git {cmd} took longer than {secs} s")]
    TimedOut { cmd: String, secs: u64 },
    #[error("cannot run git: {0}")]
    Spawn(String),
}

/// Runs `git args…` in `dir` (with extra environment); its standard output.
pub(crate) async fn git(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Result<String, GitError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let name = args.first().copied().unwrap_or_default().to_owned();
    let out = match tokio::time::timeout(GIT_TIMEOUT, cmd.output()).await {
        Err(_) => {
            return Err(GitError::TimedOut {
                cmd: name,
                secs: GIT_TIMEOUT.as_secs(),
            });
        }
        Ok(Err(e)) => return Err(GitError::Spawn(e.to_string())),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(GitError::Failed {
            cmd: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The top directory of the repository `dir` lies in.
pub(crate) async fn toplevel(dir: &Path) -> Result<PathBuf, GitError> {
    match git(dir, &["rev-parse", "--show-toplevel"], &[]).await {
        Ok(out) => Ok(PathBuf::from(out.trim())),
        Err(GitError::Failed { .. }) => Err(GitError::NotARepo {
            dir: dir.display().to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// The commit `rev` names.
pub(crate) async fn rev(dir: &Path, rev: &str) -> Result<String, GitError> {
    Ok(git(
        dir,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
        &[],
    )
    .await?
    .trim()
    .to_owned())
}

/// Whether branch `name` exists in the repository at `dir`.
pub(crate) async fn branch_exists(dir: &Path, name: &str) -> bool {
    git(
        dir,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{name}"),
        ],
        &[],
    )
    .await
    .is_ok()
}

/// A commit of the whole state of the worktree at `dir` (changes and untracked, not
/// ignored, files) on top of its `HEAD`, made through a temporary index; `reference`
/// then names it. Neither the worktree's index nor a branch moves.
pub(crate) async fn snapshot(
    dir: &Path,
    reference: &str,
    message: &str,
) -> Result<String, GitError> {
    let tmp = tempfile_path();
    let index: &Path = &tmp;
    let env = [("GIT_INDEX_FILE", index)];
    let result = async {
        git(dir, &["read-tree", "HEAD"], &env).await?;
        git(dir, &["add", "--all", "."], &env).await?;
        let tree = git(dir, &["write-tree"], &env).await?;
        let commit = git(
            dir,
            &["commit-tree", tree.trim(), "-p", "HEAD", "-m", message],
            &snapshot_identity(index),
        )
        .await?;
        let commit = commit.trim().to_owned();
        git(dir, &["update-ref", reference, &commit], &[]).await?;
        Ok(commit)
    }
    .await;
    let _ = std::fs::remove_file(&tmp);
    result
}

/// The author of snapshots (no identity configured is needed).
fn snapshot_identity(index: &Path) -> [(&'static str, &Path); 5] {
    [
        ("GIT_INDEX_FILE", index),
        ("GIT_AUTHOR_NAME", Path::new("tether")),
        ("GIT_AUTHOR_EMAIL", Path::new("tether@localhost")),
        ("GIT_COMMITTER_NAME", Path::new("tether")),
        ("GIT_COMMITTER_EMAIL", Path::new("tether@localhost")),
    ]
}

/// A temporary index file's path.
fn tempfile_path() -> PathBuf {
    std::env::temp_dir().join(format!("tether-index-{}", uuid::Uuid::new_v4().simple()))
}

/// Adds a worktree at `path` on the new branch `branch` from `base`.
pub(crate) async fn add_worktree(
    repo: &Path,
    path: &Path,
    branch: &str,
    base: &str,
) -> Result<(), GitError> {
    let _held = super::repo_lock::hold(repo).await?;
    let path = path.display().to_string();
    git(
        repo,
        &["worktree", "add", "--quiet", "-b", branch, &path, base],
        &[],
    )
    .await?;
    Ok(())
}

/// Adds back a removed worktree at `path` on its existing `branch`, with the files of
/// `snapshot` (its uncommitted and untracked work) in place; the index stays the branch's.
pub(crate) async fn restore_worktree(
    repo: &Path,
    path: &Path,
    branch: &str,
    snapshot: &str,
) -> Result<(), GitError> {
    let held = super::repo_lock::hold(repo).await?;
    git(repo, &["worktree", "prune"], &[]).await?;
    let p = path.display().to_string();
    git(repo, &["worktree", "add", "--quiet", &p, branch], &[]).await?;
    // The rest touches only the new worktree.
    drop(held);
    git(path, &["checkout", snapshot, "--", "."], &[]).await?;
    git(path, &["reset", "--quiet"], &[]).await?;
    Ok(())
}

/// Removes the worktree at `path` (its files; the branch stays).
pub(crate) async fn remove_worktree(repo: &Path, path: &Path) -> Result<(), GitError> {
    let _held = super::repo_lock::hold(repo).await?;
    let p = path.display().to_string();
    match git(repo, &["worktree", "remove", "--force", &p], &[]).await {
        Ok(_) => Ok(()),
        // Already gone: forget it.
        Err(GitError::Failed { .. }) if !path.exists() => {
            git(repo, &["worktree", "prune"], &[]).await.map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// Forgets the records of worktrees whose directories are gone.
pub(crate) async fn prune(repo: &Path) -> Result<(), GitError> {
    let _held = super::repo_lock::hold(repo).await?;
    git(repo, &["worktree", "prune"], &[]).await.map(|_| ())
}

/// Deletes branch `branch`.
pub(crate) async fn delete_branch(repo: &Path, branch: &str) -> Result<(), GitError> {
    let _held = super::repo_lock::hold(repo).await?;
    git(repo, &["branch", "--quiet", "-D", branch], &[])
        .await
        .map(|_| ())
}

/// The changes from `base` to `commit`: a `--stat` summary, the changed paths and the
/// patch.
pub(crate) async fn diff(
    repo: &Path,
    base: &str,
    commit: &str,
) -> Result<(String, Vec<String>, String), GitError> {
    let stat = git(repo, &["diff", "--stat", base, commit], &[]).await?;
    let names = git(repo, &["diff", "--name-only", base, commit], &[]).await?;
    let patch = git(repo, &["diff", "--binary", base, commit], &[]).await?;
    Ok((
        stat,
        names
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect(),
        patch,
    ))
}

/// Commits everything in the worktree at `dir` onto its branch (`None`: nothing to
/// commit).
pub(crate) async fn commit_all(dir: &Path, message: &str) -> Result<Option<String>, GitError> {
    git(dir, &["add", "--all", "."], &[]).await?;
    if git(dir, &["diff", "--cached", "--quiet"], &[])
        .await
        .is_ok()
    {
        return Ok(None);
    }
    let tmp = tempfile_path();
    let ids = snapshot_identity(&tmp);
    // The author and committer only; the real index (no GIT_INDEX_FILE).
    let env: Vec<(&str, &Path)> = ids.iter().skip(1).copied().collect();
    git(
        dir,
        &["commit", "--quiet", "--no-verify", "-m", message],
        &env,
    )
    .await?;
    Ok(Some(rev(dir, "HEAD").await?))
}

/// Files with changes in the checkout at `dir` (staged, unstaged or untracked).
pub(crate) async fn dirty_files(dir: &Path) -> Result<Vec<String>, GitError> {
    let out = git(dir, &["status", "--porcelain"], &[]).await?;
    Ok(out
        .lines()
        .filter(|l| l.len() > 3)
        .map(|l| l[3..].to_owned())
        .collect())
}

/// How a merge went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Merged {
    /// The branch had nothing the checkout lacked.
    UpToDate,
    FastForward(String),
    Merge(String),
    /// Conflicting paths; the checkout is as it was before.
    Conflict(Vec<String>),
}

/// Merges `branch` into the branch checked out at `repo` (fast-forward when it can,
/// else a merge commit unless `ff_only`); a conflict is aborted, leaving nothing half
/// done.
pub(crate) async fn merge(
    repo: &Path,
    branch: &str,
    message: &str,
    ff_only: bool,
) -> Result<Merged, GitError> {
    let _held = super::repo_lock::hold(repo).await?;
    let before = rev(repo, "HEAD").await?;
    let tip = rev(repo, branch).await?;
    if git(repo, &["merge-base", "--is-ancestor", &tip, &before], &[])
        .await
        .is_ok()
    {
        return Ok(Merged::UpToDate);
    }
    let tmp = tempfile_path();
    let ids = snapshot_identity(&tmp);
    let env: Vec<(&str, &Path)> = ids.iter().skip(1).copied().collect();
    let mode = if ff_only { "--ff-only" } else { "--ff" };
    match git(
        repo,
        &["merge", "--quiet", "--no-edit", mode, "-m", message, branch],
        &env,
    )
    .await
    {
        Ok(_) => {
            let after = rev(repo, "HEAD").await?;
            let ff = git(repo, &["rev-parse", "HEAD^2"], &[]).await.is_err();
            Ok(if ff {
                Merged::FastForward(after)
            } else {
                Merged::Merge(after)
            })
        }
        Err(GitError::Failed { stderr, cmd }) => {
            let conflicted = git(repo, &["diff", "--name-only", "--diff-filter=U"], &[])
                .await
                .unwrap_or_default();
            let files: Vec<String> = conflicted
                .lines()
                .map(str::to_owned)
                .filter(|l| !l.is_empty())
                .collect();
            // Nothing half done: the checkout goes back to where it was.
            let _ = git(repo, &["merge", "--abort"], &[]).await;
            if files.is_empty() {
                Err(GitError::Failed { cmd, stderr })
            } else {
                Ok(Merged::Conflict(files))
            }
        }
        Err(e) => Err(e),
    }
}

/// A worktree as `git worktree list` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub path: PathBuf,
    /// The branch checked out (without `refs/heads/`), none when detached.
    pub branch: Option<String>,
    pub locked: bool,
}

/// The worktrees of the repository at `repo` (its main checkout first).
pub(crate) async fn worktrees(repo: &Path) -> Result<Vec<Listed>, GitError> {
    let _held = super::repo_lock::hold(repo).await?;
    let out = git(repo, &["worktree", "list", "--porcelain"], &[]).await?;
    Ok(parse_worktrees(&out))
}

pub(crate) fn parse_worktrees(out: &str) -> Vec<Listed> {
    let mut list: Vec<Listed> = Vec::new();
    for line in out.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            list.push(Listed {
                path: PathBuf::from(p),
                branch: None,
                locked: false,
            });
        } else if let Some(last) = list.last_mut() {
            if let Some(b) = line.strip_prefix("branch ") {
                last.branch = Some(b.strip_prefix("refs/heads/").unwrap_or(b).to_owned());
            } else if line == "locked" || line.starts_with("locked ") {
                last.locked = true;
            }
        }
    }
    list
}
