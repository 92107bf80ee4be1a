//! What isolated worktrees refuse or fail with (issue 32), each with its stable code.

use tether_proto::ErrorCode;

use super::git::GitError;

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The conversation's directory is not in a git repository.
    #[error(transparent)]
    NotARepo(GitError),
    /// A branch, a checkout or a worktree is in the way (named in the message).
    #[error("{0}")]
    InTheWay(String),
    /// The branch does not merge cleanly; nothing was changed.
    #[error("{0}")]
    Conflict(String),
    /// git or the set-up command failed.
    #[error("{0}")]
    Failed(String),
}

impl WorktreeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            WorktreeError::NotARepo(_) => ErrorCode::IsolationNeedsGit,
            WorktreeError::InTheWay(_) => ErrorCode::Conflict,
            WorktreeError::Conflict(_) => ErrorCode::MergeConflict,
            WorktreeError::Failed(_) => ErrorCode::WorktreeFailed,
        }
    }
}

impl From<GitError> for WorktreeError {
    fn from(e: GitError) -> Self {
        match e {
            GitError::NotARepo { .. } => WorktreeError::NotARepo(e),
            GitError::Failed { .. } | GitError::TimedOut { .. } | GitError::Spawn(_) => {
                WorktreeError::Failed(e.to_string())
            }
        }
    }
}
