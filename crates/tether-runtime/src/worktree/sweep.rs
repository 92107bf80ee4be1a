//! Keeping tether's worktrees within bounds (issue 32). One node at a time (a durable
//! timer of kind `worktree_sweep`, every `[worktrees] sweep_interval`) cleans up:
//!
//! 1. **Stale directories**: worktrees git knows in the repositories tether works in
//!    that are tether's own (on a `tether/…` branch, in a `.tether-worktrees` or
//!    `tether-worktrees` directory) but that no conversation keeps — left by a crash
//!    between making one and storing it, say. One younger than [`stale_grace_ms`] is
//!    left alone: a conversation may be making it (its row is stored once the
//!    submodules, the copied files and the set-up command are done). Each is
//!    snapshotted on `refs/tether/snapshots/<short id>` first, then removed; git's
//!    records of directories already gone are pruned.
//! 2. **The disk budget**: when tether's worktrees take more than `disk_budget`, idle
//!    ones (no process, no open turn, unused for `sweep_idle`, no task working from
//!    them) are removed, least recently used first, after a snapshot, until the total
//!    is within the budget. Their conversations keep them: the next turn restores the
//!    directory from the snapshot (`ensure_present`) and says so.
//!
//! Nothing else is ever removed: a worktree the person made, on another branch or
//! elsewhere, and a locked one, stay.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use tether_store::{NewTimer, SweptWorktree, Timer, WORKTREE_SWEEP};

use super::{ACTIVE, git, is_worktree};
use crate::Runtime;
use crate::ctx::Ctx;
use crate::error::Result;

/// What a clean-up did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Stale directories removed.
    pub stale: usize,
    /// Idle worktrees removed for the budget.
    pub over_budget: usize,
    /// The disk tether's kept worktrees took before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// How long a clean-up's scheduling that failed waits before it tries again.
const SCHEDULE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Makes sure a clean-up is due within one interval (at start and after each one). The
/// timer's id names its slot, so nodes starting at once add it once. While the store
/// cannot take it (unreachable at start), it is tried again as long as the runtime
/// lives: without that timer no clean-up would run again.
pub(crate) fn schedule(rt: &Runtime) {
    let weak = std::sync::Arc::downgrade(&rt.inner);
    tokio::spawn(async move {
        let mut told = false;
        loop {
            let Some(inner) = weak.upgrade() else { return };
            let timer = next_sweep(&inner.ctx);
            match inner.ctx.store.timers().add_timer_once(&timer).await {
                // Added, or another node had added this slot's timer.
                Ok(_) => {
                    if told {
                        tracing::info!(timer = timer.id, "the worktree clean-up is scheduled");
                    }
                    return;
                }
                Err(e) => {
                    if !told {
                        tracing::warn!(error = %e, "cannot schedule the worktree clean-up yet; trying again");
                        told = true;
                    }
                }
            }
            drop(inner);
            tokio::time::sleep(SCHEDULE_RETRY).await;
        }
    });
}

/// The clean-up timer of the next slot of `[worktrees] sweep_interval`.
fn next_sweep(ctx: &Ctx) -> NewTimer {
    let every = i64::try_from(ctx.config.worktrees.sweep_interval.as_millis())
        .unwrap_or(i64::MAX / 4)
        .max(1);
    let slot = ctx.clock.now_ms() / every + 1;
    NewTimer {
        id: format!("worktree-sweep-{every}-{slot}"),
        kind: WORKTREE_SWEEP.to_owned(),
        conversation_id: tether_proto::ConversationId::from(String::new()),
        account: None,
        due_at_ms: slot.saturating_mul(every),
        attempt: 1,
        payload: "{}".to_owned(),
    }
}

/// Fires a clean-up (the timer loop) and schedules the next.
pub(crate) async fn fire(rt: &Runtime, t: &Timer) {
    let ctx = rt.ctx();
    match sweep(ctx).await {
        Ok(s) if s.stale + s.over_budget > 0 => tracing::info!(
            stale = s.stale,
            over_budget = s.over_budget,
            bytes_before = s.bytes_before,
            bytes_after = s.bytes_after,
            "cleaned up worktrees (their snapshots stay)"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "the worktree clean-up failed"),
    }
    if let Err(e) = ctx.store.timers().fire_timer(&t.id).await {
        tracing::warn!(timer = t.id, error = %e, "cannot mark a worktree clean-up done");
    }
    schedule(rt);
}

/// One clean-up: stale directories, then the budget.
pub(crate) async fn sweep(ctx: &Ctx) -> Result<Swept> {
    let all = ctx.store.worktrees().worktrees_for_sweep().await?;
    let mut swept = Swept {
        stale: remove_stale(&all, ctx.clock.now_ms().saturating_sub(stale_grace_ms(ctx))).await,
        ..Swept::default()
    };
    let mut sizes = Vec::with_capacity(all.len());
    for w in &all {
        let path = PathBuf::from(&w.row.path);
        let size = tokio::task::spawn_blocking(move || disk_use(&path))
            .await
            .unwrap_or(0);
        sizes.push(size);
    }
    let budget = ctx.config.worktrees.disk_budget_bytes;
    let mut total: u64 = sizes.iter().sum();
    swept.bytes_before = total;
    if total > budget {
        let idle_before = ctx.clock.now_ms().saturating_sub(
            i64::try_from(ctx.config.worktrees.sweep_idle.as_millis()).unwrap_or(i64::MAX / 4),
        );
        // A parent's worktree stays while a task works from it (its merges go there).
        let bases: HashSet<&str> = all.iter().map(|w| w.row.repo.as_str()).collect();
        for (w, size) in all.iter().zip(&sizes) {
            if total <= budget {
                break;
            }
            let idle = !w.busy && w.row.updated_at_ms <= idle_before;
            if *size == 0 || !idle || bases.contains(w.row.path.as_str()) {
                continue;
            }
            if remove_idle(ctx, w).await {
                total = total.saturating_sub(*size);
                swept.over_budget += 1;
            }
        }
    }
    swept.bytes_after = total;
    crate::metrics::worktrees_disk(total);
    Ok(swept)
}

/// Removes an idle worktree after its snapshot, when it is still idle; whether it went.
async fn remove_idle(ctx: &Ctx, w: &SweptWorktree) -> bool {
    let id = &w.row.conversation_id;
    // Asked again just before: a turn may have begun since the list was read.
    let still_idle = ctx
        .store
        .worktrees()
        .worktrees_for_sweep()
        .await
        .ok()
        .and_then(|all| all.into_iter().find(|x| &x.row.conversation_id == id))
        .is_some_and(|x| !x.busy && x.row.updated_at_ms == w.row.updated_at_ms);
    if !still_idle {
        return false;
    }
    if let Err(e) = super::snapshot(ctx, id, "tether: before removing an idle worktree").await {
        tracing::warn!(conversation = %id, error = %e, "cannot snapshot an idle worktree; kept");
        return false;
    }
    match git::remove_worktree(Path::new(&w.row.repo), Path::new(&w.row.path)).await {
        Ok(()) => {
            tracing::info!(conversation = %id, path = %w.row.path, "removed an idle worktree over the disk budget (restored at its next turn)");
            crate::metrics::worktree_removed("budget");
            true
        }
        Err(e) => {
            tracing::warn!(conversation = %id, error = %e, "cannot remove an idle worktree");
            false
        }
    }
}

/// How old a worktree no row keeps must be to count as stale (ms): one being made is
/// stored only after its set-up command (bounded by `setup_timeout`), its submodules
/// and its copied files, so that, and ten minutes more.
fn stale_grace_ms(ctx: &Ctx) -> i64 {
    let grace = ctx
        .config
        .worktrees
        .setup_timeout
        .saturating_add(std::time::Duration::from_secs(600));
    i64::try_from(grace.as_millis()).unwrap_or(i64::MAX)
}

/// When git added the worktree at `dir` (ms since the epoch): its `.git` file is
/// written then and never again (`None` when it cannot be read: not a worktree any
/// more).
fn added_at_ms(dir: &Path) -> Option<i64> {
    let added = std::fs::symlink_metadata(dir.join(".git"))
        .and_then(|m| m.modified())
        .ok()?;
    let since_epoch = added.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_millis()).ok()
}

/// Removes tether's worktrees no conversation keeps, added by git at or before
/// `added_before_ms`, in every repository tether's worktrees belong to; how many went.
async fn remove_stale(all: &[SweptWorktree], added_before_ms: i64) -> usize {
    let kept: HashSet<PathBuf> = all
        .iter()
        .filter(|w| w.row.status == ACTIVE && !w.row.path.is_empty())
        .flat_map(|w| {
            let p = PathBuf::from(&w.row.path);
            let canonical = p.canonicalize().ok();
            std::iter::once(p).chain(canonical)
        })
        .collect();
    let repos: BTreeSet<PathBuf> = all
        .iter()
        .filter(|w| !w.row.repo.is_empty())
        .map(|w| PathBuf::from(&w.row.repo))
        .filter(|r| r.exists())
        .collect();
    let mut removed = 0;
    let mut seen = HashSet::new();
    for repo in repos {
        let Ok(listed) = git::worktrees(&repo).await else {
            continue;
        };
        for wt in listed {
            let canonical = wt.path.canonicalize().unwrap_or_else(|_| wt.path.clone());
            let ours = wt.branch.as_deref().and_then(|b| b.strip_prefix("tether/"));
            let (Some(short), false, false) = (ours, wt.locked, kept.contains(&canonical)) else {
                continue;
            };
            if kept.contains(&wt.path)
                || !is_worktree(&wt.path.display().to_string())
                || added_at_ms(&wt.path).is_none_or(|at| at > added_before_ms)
                || !seen.insert(canonical)
            {
                continue;
            }
            // The ref `snapshot_ref` gives the conversation of branch `tether/<short>`.
            let reference = format!("refs/tether/snapshots/{short}");
            if let Err(e) = git::snapshot(
                &wt.path,
                &reference,
                "tether: before removing a stale worktree",
            )
            .await
            {
                tracing::warn!(path = %wt.path.display(), error = %e, "cannot snapshot a stale worktree; kept");
                continue;
            }
            match git::remove_worktree(&repo, &wt.path).await {
                Ok(()) => {
                    tracing::info!(path = %wt.path.display(), snapshot = reference, "removed a stale worktree");
                    crate::metrics::worktree_removed("stale");
                    removed += 1;
                }
                Err(e) => {
                    tracing::warn!(path = %wt.path.display(), error = %e, "cannot remove a stale worktree")
                }
            }
        }
        // Records of directories that are gone already.
        let _ = git::prune(&repo).await;
    }
    removed
}

/// The bytes of the files under `dir` (symbolic links not followed); 0 when missing.
fn disk_use(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_use_counts_files_and_not_links() {
        let dir = std::env::temp_dir().join(format!("tether-du-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/one"), vec![0u8; 1000]).unwrap();
        std::fs::write(dir.join("a/b/two"), vec![0u8; 24]).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("/usr", dir.join("link")).unwrap();
        assert_eq!(disk_use(&dir), 1024 + disk_use_of_link(&dir.join("link")));
        assert_eq!(disk_use(&dir.join("missing")), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn when_git_added_a_worktree_is_read_from_its_git_file() {
        let dir = std::env::temp_dir().join(format!("tether-age-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(added_at_ms(&dir), None, "no .git file: not a worktree");
        std::fs::write(dir.join(".git"), "gitdir: /r/.git/worktrees/w\n").unwrap();
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let f = std::fs::File::options()
            .write(true)
            .open(dir.join(".git"))
            .unwrap();
        f.set_modified(at).unwrap();
        // Files written in the worktree since do not make it younger.
        std::fs::write(dir.join("work.txt"), "x").unwrap();
        assert_eq!(added_at_ms(&dir), Some(1_000_000_000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn disk_use_of_link(p: &Path) -> u64 {
        std::fs::symlink_metadata(p).map_or(0, |m| m.len())
    }

    #[test]
    fn worktree_lists_are_read_with_branches_and_locks() {
        let out = "worktree /r\nHEAD 1\nbranch refs/heads/main\n\nworktree /w/a\nHEAD 2\n\
                   branch refs/heads/tether/abc\nlocked on a stick\n\nworktree /w/b\nHEAD 3\ndetached\n";
        let l = git::parse_worktrees(out);
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].branch.as_deref(), Some("main"));
        assert_eq!(l[1].branch.as_deref(), Some("tether/abc"));
        assert!(l[1].locked && !l[0].locked);
        assert_eq!(l[2].branch, None);
        assert_eq!(l[2].path, PathBuf::from("/w/b"));
    }
}
