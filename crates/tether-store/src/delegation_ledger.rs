//! The continuation ledger (idempotent continue/close per parent conversation), releasing
//! a task, and the once-only outcome reports on the parent's session.

use tether_proto::TaskId;

/// A continue or close remembered under its continuation id.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    pub scope: String,
    pub continuation_id: String,
    pub task_id: TaskId,
    /// `continue` or `close`.
    pub action: String,
    pub message: Option<String>,
    pub result: serde_json::Value,
}
