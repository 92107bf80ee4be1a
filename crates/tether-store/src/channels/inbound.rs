//! Inbound updates kept until handled: recorded together with their dedupe key, marked
//! handled by the channel once the runtime has stored the message's turn, and replayed at
//! start-up while unhandled (so an accepted message survives a crash).

/// An accepted inbound update not yet marked handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingInbound {
    pub key: String,
    /// The raw update as it was accepted.
    pub payload: String,
}
