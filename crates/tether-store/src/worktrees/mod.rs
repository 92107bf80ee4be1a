//! Isolated worktrees (issue 32; migration 0029 / PostgreSQL 0021): one row per
//! conversation that runs in a git worktree of its own — where, on which branch, from
//! which base, its latest snapshot, and what became of it.

use tether_proto::ConversationId;

/// The timer kind that removes an archived conversation's worktree after its grace.
pub const WORKTREE_REMOVAL: &str = "worktree_removal";
/// The timer kind of the periodic clean-up of worktree directories (one node sweeps).
pub const WORKTREE_SWEEP: &str = "worktree_sweep";

/// A conversation's worktree as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeRow {
    pub conversation_id: ConversationId,
    /// The repository's top directory (where it is merged back).
    pub repo: String,
    /// The worktree's directory (the session's working directory).
    pub path: String,
    pub branch: String,
    /// The commit it was made from (its diff is against this).
    pub base: String,
    /// `wanted` (isolation on, not made yet), `active`, `merged`, `discarded`, `off`.
    pub status: String,
    /// The latest snapshot commit (`refs/tether/snapshots/<branch's id>`).
    pub snapshot: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A worktree as the clean-up sees it: whether its conversation is at work now (a
/// session with a process, or a turn not ended), when nothing may be removed under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweptWorktree {
    pub row: WorktreeRow,
    pub busy: bool,
}
