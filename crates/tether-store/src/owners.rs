//! Which node owns a conversation (issue 12; see `sql/owners.rs`): the owner runs the
//! conversation's live agent process and writes on its behalf under a fencing epoch that
//! rises on every claim. The epochs this node holds are remembered here, so the write
//! paths can carry them without every caller passing them along.

use std::collections::HashMap;
use std::sync::Mutex;

use tether_proto::ConversationId;

/// A conversation's owner as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRow {
    pub conversation_id: ConversationId,
    pub node_id: String,
    /// Rises on every claim; a write carrying an older one is stale.
    pub epoch: i64,
    pub claimed_at_ms: i64,
    /// The owning node's lease (`None`: the node has no row any more, it is gone).
    pub lease_until_ms: Option<i64>,
}

impl OwnerRow {
    /// Whether the owning node's lease still holds at `now_ms`.
    pub fn alive(&self, now_ms: i64) -> bool {
        self.lease_until_ms.is_some_and(|until| until > now_ms)
    }
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This node now owns the conversation under a new `epoch` (it was unowned, or its
    /// owner's lease had ended).
    Claimed { epoch: i64 },
    /// This node owned it already, under `epoch`.
    Held { epoch: i64 },
    /// Another node whose lease holds owns it.
    Owned(OwnerRow),
}

impl Claim {
    /// The epoch this node holds after the claim, if it holds one.
    pub fn epoch(&self) -> Option<i64> {
        match self {
            Claim::Claimed { epoch } | Claim::Held { epoch } => Some(*epoch),
            Claim::Owned(_) => None,
        }
    }
}

/// The epochs of the conversations this store's node holds (in memory; the database is
/// the truth, this is what the node believes).
#[derive(Default)]
pub(crate) struct Held(Mutex<HashMap<ConversationId, i64>>);

impl Held {
    pub(crate) fn set(&self, id: &ConversationId, epoch: i64) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(id.clone(), epoch);
        }
    }

    pub(crate) fn get(&self, id: &ConversationId) -> Option<i64> {
        self.0.lock().ok().and_then(|m| m.get(id).copied())
    }

    pub(crate) fn forget(&self, id: &ConversationId) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(id);
        }
    }
}
