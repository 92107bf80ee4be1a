//! Which node owns a conversation (issue 12; see `sql_owners.rs`): the owner runs the
//! conversation's live agent process and writes on its behalf under a fencing epoch that
//! rises on every claim. The epochs this node holds are remembered here, so the write
//! paths can carry them without every caller passing them along.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tether_proto::{ConversationId, TurnId};

/// A conversation's owner as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRow {
    pub conversation_id: ConversationId,
    pub node_id: tether_proto::NodeId,
    /// Rises on every claim; a write carrying an older one is stale.
    pub epoch: i64,
    pub claimed_at_ms: i64,
    /// The owning node's lease (`None`: the node has no row any more, it is gone).
    pub lease_until_ms: Option<i64>,
    /// When the owning node (this run of it) started: a restarted node is a new one to
    /// presence verdicts.
    pub node_started_at_ms: Option<i64>,
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
/// the truth, this is what the node believes), and the writes refused because one was
/// stale.
#[derive(Default)]
pub(crate) struct Held {
    /// Per conversation: the epoch, and whether a write under it was refused (stale).
    epochs: Mutex<HashMap<ConversationId, (i64, bool)>>,
    /// Whether any epoch is held: while none is, nothing is fenced and a write needs no
    /// transaction of its own for the check (SQLite's single node never claims).
    any: AtomicBool,
    /// Writes refused with `StoreError::Fenced` since the store opened.
    fenced: AtomicU64,
    /// The conversation of each turn this node started and has not ended (a turn never
    /// moves): its end, which names only the turn, knows the epoch to check in the same
    /// statement (`turns_fenced`). A turn not found here ends on the general path.
    turns: Mutex<HashMap<TurnId, ConversationId>>,
}

/// Turns remembered at most ([`Held::note_turn`]); past that the memory starts again
/// (it is only a short cut: a turn not found ends on the general path).
const TURNS_REMEMBERED: usize = 100_000;

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, (i64, bool)>> {
        // A panic while holding this lock leaves a consistent map (insert and remove).
        self.epochs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set(&self, id: &ConversationId, epoch: i64) {
        let mut m = self.lock();
        m.insert(id.clone(), (epoch, false));
        self.any.store(true, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, id: &ConversationId) -> Option<i64> {
        if !self.any() {
            return None;
        }
        self.lock().get(id).map(|(epoch, _)| *epoch)
    }

    pub(crate) fn forget(&self, id: &ConversationId) {
        let mut m = self.lock();
        m.remove(id);
        self.any.store(!m.is_empty(), Ordering::Relaxed);
    }

    /// Whether this node holds any epoch at all (one atomic load).
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// A write for conversation `id` was refused: its epoch is stale (kept, so every
    /// later write under it is refused too, until a new claim).
    pub(crate) fn refused(&self, id: &ConversationId) {
        self.fenced.fetch_add(1, Ordering::Relaxed);
        if let Some(entry) = self.lock().get_mut(id) {
            entry.1 = true;
        }
    }

    /// The conversations held and not known stale, with their epochs.
    pub(crate) fn list(&self) -> Vec<(ConversationId, i64)> {
        if !self.any() {
            return Vec::new();
        }
        self.lock()
            .iter()
            .filter(|(_, (_, stale))| !stale)
            .map(|(id, (epoch, _))| (id.clone(), *epoch))
            .collect()
    }

    /// The claim on `id` under `epoch` was found taken by another node (no write was
    /// refused): every later write under it is refused, until a new claim.
    pub(crate) fn lost(&self, id: &ConversationId, epoch: i64) {
        if let Some(entry) = self.lock().get_mut(id)
            && entry.0 == epoch
        {
            entry.1 = true;
        }
    }

    /// Whether a write under the epoch held for `id` was refused.
    pub(crate) fn is_stale(&self, id: &ConversationId) -> bool {
        self.any() && self.lock().get(id).is_some_and(|(_, stale)| *stale)
    }

    /// Remembers that turn `turn` (started by this node) is conversation `id`'s.
    pub(crate) fn note_turn(&self, turn: &TurnId, id: &ConversationId) {
        let mut m = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= TURNS_REMEMBERED {
            m.clear();
        }
        m.insert(turn.clone(), id.clone());
    }

    /// The conversation of turn `turn`, as [`Held::note_turn`] remembered it.
    pub(crate) fn turn_conversation(&self, turn: &TurnId) -> Option<ConversationId> {
        let m = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        m.get(turn).cloned()
    }

    /// Turn `turn` ended (or will not end here): forgotten.
    pub(crate) fn forget_turn(&self, turn: &TurnId) {
        let mut m = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(turn);
    }

    /// Writes refused so far.
    pub(crate) fn refusals(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }
}
