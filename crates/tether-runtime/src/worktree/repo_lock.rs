//! One worktree change at a time per repository. git's own worktree commands are not
//! safe side by side: a `git worktree add` reads every other worktree's record under
//! `.git/worktrees/`, and one that another `add` is still writing makes it fail
//! ("failed to read .git/worktrees/…/commondir"); two merges into one checkout meet on
//! its `index.lock`. Two conversations on one repository start their first turns at
//! once as a matter of course, so tether takes a lock on the repository first: an
//! advisory file lock (`flock`) on `tether-worktrees.lock` in its common git directory,
//! which orders this daemon's tasks and every other tether process on the machine (the
//! nodes of a cluster on one host) alike. Held only around one operation, never nested.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};

use super::git::{GIT_TIMEOUT, GitError, git};

/// How long an operation waits for another's turn before it gives up: the longest one
/// held (a merge: up to eight git commands, each within `GIT_TIMEOUT`).
const WAIT: Duration = GIT_TIMEOUT.saturating_mul(8);
/// How often a waiting operation tries again.
const POLL: Duration = Duration::from_millis(10);

/// The lock on one repository, held until dropped (closing the file lets it go).
#[derive(Debug)]
pub(crate) struct RepoLock {
    _file: File,
}

/// Waits for the repository `dir` belongs to (a checkout or any of its worktrees) and
/// holds it.
pub(crate) async fn hold(dir: &Path) -> Result<RepoLock, GitError> {
    let path = lock_path(dir).await?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| GitError::Spawn(format!("cannot open {}: {e}", path.display())))?;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // rustix's `flock` rather than std's `File::try_lock` (Rust 1.89; the workspace
        // keeps 1.88, as `datadir.rs` does).
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(RepoLock { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(POLL).await;
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(GitError::TimedOut {
                    cmd: format!("worktree lock {}", path.display()),
                    secs: WAIT.as_secs(),
                });
            }
            Err(e) => {
                return Err(GitError::Spawn(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )));
            }
        }
    }
}

/// `tether-worktrees.lock` in the common git directory of the repository at `dir`.
async fn lock_path(dir: &Path) -> Result<PathBuf, GitError> {
    let common = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        &[],
    )
    .await?;
    Ok(PathBuf::from(common.trim()).join("tether-worktrees.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_for_the_first_from_the_repository_or_a_worktree() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        tether_testkit::git::init_repo(&repo, &[("a.txt", "a\n")]);
        let wt = tmp.path().join("wt");
        tether_testkit::git::git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "x",
                &wt.display().to_string(),
            ],
        );
        let first = tokio::time::timeout(Duration::from_secs(10), hold(&repo))
            .await
            .unwrap()
            .unwrap();
        // The same repository through its worktree: the same lock, so it waits.
        let waiting = tokio::spawn(async move { hold(&wt).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "waits while the first holds it");
        drop(first);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    /// Without the lock, about one run in three of this failed on this VM ("failed to
    /// read .git/worktrees/…/commondir").
    #[tokio::test]
    async fn twelve_worktrees_added_at_once_to_one_repository_all_arrive() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        tether_testkit::git::init_repo(&repo, &[("a.txt", "a\n")]);
        let adds = (0..12).map(|i| {
            let (repo, dir) = (repo.clone(), tmp.path().join(format!("wt{i}")));
            tokio::spawn(async move {
                super::super::git::add_worktree(&repo, &dir, &format!("b{i}"), "HEAD").await
            })
        });
        let all = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(adds))
            .await
            .unwrap();
        for (i, added) in all.into_iter().enumerate() {
            added
                .unwrap()
                .unwrap_or_else(|e| panic!("worktree {i}: {e}"));
        }
        let listed = super::super::git::worktrees(&repo).await.unwrap();
        assert_eq!(listed.len(), 13, "{listed:?}");
    }
}
