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

/// What claiming a continuation id found (see `Delegation::claim_continuation`).
#[derive(Debug, Clone, PartialEq)]
pub enum ContinuationClaim {
    /// The id is recorded: the request it was used for, to answer again or refuse.
    Recorded(LedgerEntry),
    /// The id is this request's until its ledger entry is recorded or the claim is
    /// given back.
    Claimed,
    /// Another request holds it right now, on `node_id`.
    Held { node_id: String },
}

/// How long a claim stays held when its node never gives it back (while that node's
/// lease holds): longer than any continue or close runs.
pub const CLAIM_STALE_MS: i64 = 10 * 60 * 1000;
