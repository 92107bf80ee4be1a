//! Isolated worktrees (issue 32): a conversation that asks for isolation runs its
//! sessions in a git worktree of its own, on the branch `tether/<short id>`, made from the
//! `HEAD` of the conversation's directory when its next session starts. At every turn's
//! end (and before any removal) its whole state is recorded as a commit on
//! `refs/tether/snapshots/<short id>` (`git::snapshot`: no index or branch moves); a
//! worktree missing when a session starts or resumes (another node, a cleaned disk) is
//! restored from it first. The person sees the diff, merges the branch back (fast-forward
//! or a merge commit; a conflict is aborted, nothing half done) or discards it.
//!
//! Where: beside the repository (`<parent>/.tether-worktrees/<repo>-<short id>`) when its
//! parent lies in a workspace root, else in the repository's git directory — on a cluster
//! both are on the shared workspace storage, so every node continues in the same tree.

mod commands;
pub(crate) use commands::fire_removal;
pub(crate) mod error;
pub(crate) mod git;
mod place;
mod repo_lock;
pub(crate) mod sweep;

pub use error::WorktreeError;

use std::path::{Path, PathBuf};

use tether_proto::{ConversationId, WorktreeView};
use tether_store::WorktreeRow;

use crate::Runtime;
use crate::ctx::Ctx;
use crate::error::{Result, RuntimeError};
use git::{GitError, Merged};

/// Worktree statuses as stored.
pub(crate) const WANTED: &str = "wanted";
pub(crate) const ACTIVE: &str = "active";
const OFF: &str = "off";

/// The service: a view of the runtime (see `Runtime::worktrees`).
#[derive(Clone, Copy)]
pub struct Worktrees<'a> {
    pub(crate) rt: &'a Runtime,
}

/// The short id naming a conversation's branch and directory.
pub(crate) fn short(id: &ConversationId) -> String {
    id.as_str().chars().take(8).collect()
}

/// The ref of a conversation's snapshots (`sweep.rs` names it from a branch too).
pub(crate) fn snapshot_ref(id: &ConversationId) -> String {
    format!("refs/tether/snapshots/{}", short(id))
}

impl<'a> Worktrees<'a> {
    fn now(self) -> i64 {
        self.rt.ctx().clock.now_ms()
    }

    /// The conversation, when the acting person may write in it.
    async fn writable(self, id: &ConversationId) -> Result<tether_store::ConversationRow> {
        self.rt.access().write(id).await?;
        self.rt.conversations().conversation_row(id).await
    }

    /// Turns isolation on or off for the conversation's next session. Off is refused
    /// while a worktree holds work (merge or discard it first).
    pub async fn set_isolation(self, id: &ConversationId, on: bool) -> Result<WorktreeView> {
        let store = &self.rt.ctx().store;
        let conv = self.writable(id).await?;
        let row = store.worktrees().get_worktree(id).await?;
        let now = self.now();
        let next = match (row, on) {
            (Some(r), true) if r.status == ACTIVE || r.status == WANTED => r,
            (Some(r), false) if r.status == ACTIVE => {
                return Err(in_the_way(format!(
                    "the worktree on {} holds this conversation's work: merge or discard it first",
                    r.branch
                )));
            }
            (row, on) => {
                if on {
                    // Refused at once when there is no git: not at the next message.
                    git::toplevel(Path::new(&conv.cwd)).await?;
                }
                WorktreeRow {
                    conversation_id: id.clone(),
                    repo: String::new(),
                    path: String::new(),
                    branch: format!("tether/{}", short(id)),
                    base: String::new(),
                    status: if on { WANTED } else { OFF }.to_owned(),
                    snapshot: None,
                    created_at_ms: row.map_or(now, |r| r.created_at_ms),
                    updated_at_ms: now,
                }
            }
        };
        store.worktrees().save_worktree(&next).await?;
        store.worktrees().set_isolated(id, on).await?;
        self.view_of(&next).await
    }

    /// The working directory of a new session of `conv`: its worktree's (made now when
    /// isolation is wanted, restored when missing), with a line for the person; `None`
    /// when the conversation is not isolated.
    pub(crate) async fn session_cwd(
        self,
        conv: &tether_store::ConversationRow,
    ) -> Result<Option<(String, Option<String>)>> {
        if !conv.isolated {
            return Ok(None);
        }
        let store = &self.rt.ctx().store;
        let Some(row) = store.worktrees().get_worktree(&conv.id).await? else {
            return Ok(None);
        };
        match row.status.as_str() {
            // A task's new worktree (after a discard) branches from its parent again.
            WANTED if conv.parent_conversation_id.is_some() => {
                let parent = conv
                    .parent_conversation_id
                    .clone()
                    .unwrap_or_else(|| conv.id.clone());
                match self.for_child(&parent, &conv.id).await? {
                    Some(w) => {
                        store.worktrees().save_worktree(&w).await?;
                        let note = format!(
                            "🌿 Working in a new worktree on {} from the parent's current state",
                            w.branch
                        );
                        Ok(Some((w.path, Some(note))))
                    }
                    None => self.make(conv, row).await.map(Some),
                }
            }
            WANTED => self.make(conv, row).await.map(Some),
            ACTIVE => {
                let note = ensure_present(&row).await?;
                Ok(Some((row.path, note)))
            }
            _ => Ok(None),
        }
    }

    /// A delegated task of an isolated parent works in a worktree of its own, branched
    /// from the parent's current state (its snapshot: uncommitted work included) and
    /// merged back into the parent's branch. Made before the task's conversation exists:
    /// its directory and the row to store once it does (`None`: the parent is not
    /// isolated).
    pub(crate) async fn for_child(
        self,
        parent: &ConversationId,
        task: &ConversationId,
    ) -> Result<Option<WorktreeRow>> {
        let store = &self.rt.ctx().store;
        let Some(prow) = store.worktrees().get_worktree(parent).await? else {
            return Ok(None);
        };
        if prow.status != ACTIVE {
            return Ok(None);
        }
        ensure_present(&prow).await?;
        let Some(base) = snapshot(
            self.rt.ctx(),
            parent,
            "tether: the base of a delegated task",
        )
        .await?
        else {
            return Ok(None);
        };
        let repo = PathBuf::from(&prow.path);
        let branch = format!("tether/{}", short(task));
        let path = place::worktree_dir(&repo, task, &self.rt.ctx().config).await?;
        git::add_worktree(&repo, &path, &branch, &base).await?;
        let now = self.now();
        Ok(Some(WorktreeRow {
            conversation_id: task.clone(),
            repo: prow.path.clone(),
            path: path.display().to_string(),
            branch,
            base,
            status: ACTIVE.to_owned(),
            snapshot: None,
            created_at_ms: now,
            updated_at_ms: now,
        }))
    }

    /// Makes the worktree of `conv` from the `HEAD` of its directory.
    async fn make(
        self,
        conv: &tether_store::ConversationRow,
        mut row: WorktreeRow,
    ) -> Result<(String, Option<String>)> {
        let repo = git::toplevel(Path::new(&conv.cwd)).await?;
        let base = git::rev(&repo, "HEAD").await?;
        let branch = format!("tether/{}", short(&conv.id));
        if git::branch_exists(&repo, &branch).await {
            return Err(in_the_way(format!(
                "the branch {branch} exists already in {}: delete or rename it",
                repo.display()
            )));
        }
        let path = place::worktree_dir(&repo, &conv.id, &self.rt.ctx().config).await?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| failed(format!("cannot create {}: {e}", parent.display())))?;
        }
        let started = std::time::Instant::now();
        git::add_worktree(&repo, &path, &branch, &base).await?;
        let submodules = place::init_submodules(&path).await;
        let copied = place::copy_included(&repo, &path);
        let setup = place::run_setup(&path, &self.rt.ctx().config).await;
        let now = self.now();
        row = WorktreeRow {
            repo: repo.display().to_string(),
            path: path.display().to_string(),
            branch: branch.clone(),
            base: base.clone(),
            status: ACTIVE.to_owned(),
            updated_at_ms: now,
            ..row
        };
        self.rt.ctx().store.worktrees().save_worktree(&row).await?;
        let mut note = format!(
            "🌿 Working in an isolated worktree on {branch} (from {}), in {} ({} ms)",
            &base[..base.len().min(10)],
            row.path,
            started.elapsed().as_millis()
        );
        if copied > 0 {
            note.push_str(&format!("; copied {copied} listed file(s) in"));
        }
        if let Some(s) = submodules {
            note.push_str(&format!("\n{s}"));
        }
        // A dirty base: the worktree has HEAD, not the checkout's uncommitted changes.
        if let Ok(dirty) = git::dirty_files(&repo).await
            && !dirty.is_empty()
        {
            note.push_str(&format!(
                "\n⚠️ {} has {} uncommitted change(s) ({}); the worktree starts from HEAD without them",
                repo.display(),
                dirty.len(),
                dirty.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        match setup {
            place::Setup::None => {}
            place::Setup::Done(out) => note.push_str(&format!("\nSet-up ran:\n{out}")),
            place::Setup::Failed(why) => {
                return Err(failed(format!(
                    "the worktree's set-up failed, the turn did not start: {why}"
                )));
            }
        }
        Ok((row.path, Some(note)))
    }

    /// The worktree of conversation `id` with its changes against the base.
    /// (`none`: the conversation works in its own directory.)
    pub async fn view(self, id: &ConversationId) -> Result<WorktreeView> {
        self.rt.conversations().readable_row(id).await?;
        match self.rt.ctx().store.worktrees().get_worktree(id).await? {
            Some(row) => self.view_of(&row).await,
            None => Ok(WorktreeView {
                status: "none".to_owned(),
                branch: String::new(),
                path: None,
                base: None,
                snapshot: None,
                changed_files: Vec::new(),
                stat: String::new(),
            }),
        }
    }

    async fn row(self, id: &ConversationId) -> Result<WorktreeRow> {
        self.rt
            .ctx()
            .store
            .worktrees()
            .get_worktree(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "worktree",
                id: id.to_string(),
            })
    }

    async fn view_of(self, row: &WorktreeRow) -> Result<WorktreeView> {
        let mut view = WorktreeView {
            status: row.status.clone(),
            branch: row.branch.clone(),
            path: (!row.path.is_empty()).then(|| row.path.clone()),
            base: (!row.base.is_empty()).then(|| row.base.clone()),
            snapshot: row.snapshot.clone(),
            changed_files: Vec::new(),
            stat: String::new(),
        };
        if row.status == ACTIVE
            && let Some(commit) = snapshot(
                self.rt.ctx(),
                &row.conversation_id,
                "tether: state for a diff",
            )
            .await?
        {
            let (stat, files, _) = git::diff(Path::new(&row.repo), &row.base, &commit).await?;
            view.stat = stat;
            view.changed_files = files;
            view.snapshot = Some(commit);
        }
        Ok(view)
    }

    /// The patch of the worktree's changes against its base (uncommitted and untracked
    /// files included).
    pub async fn patch(self, id: &ConversationId) -> Result<String> {
        self.rt.conversations().readable_row(id).await?;
        let row = self.row(id).await?;
        let commit = snapshot(self.rt.ctx(), id, "tether: state for a patch")
            .await?
            .or(row.snapshot.clone())
            .ok_or_else(|| in_the_way("this conversation has no worktree work yet"))?;
        let (_, _, patch) = git::diff(Path::new(&row.repo), &row.base, &commit).await?;
        Ok(patch)
    }

    /// Merges the worktree's branch into the branch checked out in the repository:
    /// everything in the worktree is committed onto its branch first; the checkout must
    /// be clean; a conflict changes nothing (`merge_conflict`, the paths named).
    pub async fn merge(self, id: &ConversationId, ff_only: bool) -> Result<WorktreeView> {
        let row = self.row(id).await?;
        if row.status != ACTIVE {
            return Err(in_the_way(format!(
                "the worktree is {}, nothing to merge",
                row.status
            )));
        }
        let repo = PathBuf::from(&row.repo);
        let lock = place::repo_lock(&repo);
        let _held = lock.lock().await;
        snapshot(self.rt.ctx(), id, "tether: before a merge").await?;
        let conv = self.writable(id).await?;
        git::commit_all(Path::new(&row.path), &format!("tether: {}", conv.title)).await?;
        // Into a parent's worktree (a delegated task's merge): its own work is committed
        // on its branch first, as tether's worktree it is.
        if is_worktree(&row.repo) {
            git::commit_all(
                &repo,
                &format!("tether: work before merging {}", row.branch),
            )
            .await?;
        }
        let dirty = git::dirty_files(&repo).await?;
        if !dirty.is_empty() {
            return Err(in_the_way(format!(
                "{} has uncommitted changes ({}): commit or stash them, then merge again",
                repo.display(),
                dirty.join(", ")
            )));
        }
        let message = format!("Merge {} ({})", row.branch, conv.title);
        match git::merge(&repo, &row.branch, &message, ff_only).await? {
            Merged::Conflict(files) => Err(conflict(format!(
                "{} does not merge into {} cleanly (conflicts in {}); nothing was changed",
                row.branch,
                repo.display(),
                files.join(", ")
            ))),
            Merged::UpToDate | Merged::FastForward(_) | Merged::Merge(_) => {
                self.view_of(&row).await
            }
        }
    }

    /// Discards the worktree: its state is recorded as a snapshot, then the directory
    /// and the branch go, and the conversation's session with them (the next message
    /// starts a new session in a new worktree). A delegated task keeps its one session,
    /// so discarding its work closes it (a person decided against it; its history stays).
    pub async fn discard(self, id: &ConversationId) -> Result<WorktreeView> {
        let conv = self.writable(id).await?;
        let mut row = self.row(id).await?;
        if row.status != ACTIVE {
            return Err(in_the_way(format!(
                "the worktree is {}, nothing to discard",
                row.status
            )));
        }
        snapshot(self.rt.ctx(), id, "tether: before discarding").await?;
        let task = conv.parent_conversation_id.is_some();
        if task {
            let continuation = format!("discard:{}", self.now());
            self.rt
                .close_task(
                    &crate::Caller::Person,
                    &tether_proto::TaskId::of_conversation(id),
                    &continuation,
                )
                .await?;
        } else {
            self.rt.detach(id).await?;
        }
        let repo = PathBuf::from(&row.repo);
        git::remove_worktree(&repo, Path::new(&row.path)).await?;
        git::delete_branch(&repo, &row.branch).await?;
        row.status = if task { "discarded" } else { WANTED }.to_owned();
        row.updated_at_ms = self.now();
        self.rt.ctx().store.worktrees().save_worktree(&row).await?;
        let mut view = self.view_of(&row).await?;
        view.status = "discarded".to_owned();
        Ok(view)
    }
}

/// Whether `cwd` is one of tether's worktrees (they live in a `.tether-worktrees` or
/// `tether-worktrees` directory: see `place::worktree_dir`).
pub(crate) fn is_worktree(cwd: &str) -> bool {
    Path::new(cwd).components().any(|c| {
        let c = c.as_os_str();
        c == ".tether-worktrees" || c == "tether-worktrees"
    })
}

/// Removes a worktree made for a task whose conversation could not be stored.
pub(crate) async fn abandon(row: &WorktreeRow) {
    let repo = PathBuf::from(&row.repo);
    if let Err(e) = git::remove_worktree(&repo, Path::new(&row.path)).await {
        tracing::warn!(path = %row.path, error = %e, "cannot remove an abandoned worktree");
    }
    let _ = git::delete_branch(&repo, &row.branch).await;
}

/// Restores a missing worktree from its snapshot (or its branch); a line saying so.
async fn ensure_present(row: &WorktreeRow) -> Result<Option<String>> {
    let path = PathBuf::from(&row.path);
    if path.exists() {
        return Ok(None);
    }
    let repo = PathBuf::from(&row.repo);
    let from = row.snapshot.clone().unwrap_or_else(|| row.branch.clone());
    git::restore_worktree(&repo, &path, &row.branch, &from).await?;
    Ok(Some(format!(
        "🌿 The worktree on {} was missing here; restored it from {}",
        row.branch,
        if row.snapshot.is_some() {
            "its last snapshot"
        } else {
            "its branch"
        }
    )))
}

/// Restores the worktree of conversation `id` if it is missing (before an agent starts
/// or resumes in it); the line to tell the person.
pub(crate) async fn restore_if_missing(ctx: &Ctx, id: &ConversationId) -> Result<Option<String>> {
    match ctx.store.worktrees().get_worktree(id).await? {
        Some(row) if row.status == ACTIVE => ensure_present(&row).await,
        _ => Ok(None),
    }
}

/// Records the worktree's state as a snapshot (after a turn, before a removal).
pub(crate) async fn snapshot(ctx: &Ctx, id: &ConversationId, why: &str) -> Result<Option<String>> {
    let Some(row) = ctx.store.worktrees().get_worktree(id).await? else {
        return Ok(None);
    };
    if row.status != ACTIVE || !Path::new(&row.path).exists() {
        return Ok(None);
    }
    let commit = git::snapshot(Path::new(&row.path), &snapshot_ref(id), why).await?;
    ctx.store
        .worktrees()
        .set_worktree_snapshot(id, &commit, ctx.clock.now_ms())
        .await?;
    Ok(Some(commit))
}

impl From<GitError> for crate::RuntimeError {
    fn from(e: GitError) -> Self {
        crate::RuntimeError::Worktree(e.into())
    }
}

fn in_the_way(m: impl Into<String>) -> crate::RuntimeError {
    crate::RuntimeError::Worktree(WorktreeError::InTheWay(m.into()))
}

fn conflict(m: impl Into<String>) -> crate::RuntimeError {
    crate::RuntimeError::Worktree(WorktreeError::Conflict(m.into()))
}

fn failed(m: impl Into<String>) -> crate::RuntimeError {
    crate::RuntimeError::Worktree(WorktreeError::Failed(m.into()))
}
