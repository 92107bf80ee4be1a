//! Since when this node drains (issue 31; see `drain.rs`): kept in the runtime's
//! context and written into the node's registry row by its heartbeat.

use std::sync::Arc;

/// Since when this node drains (shared with its membership's heartbeat, which writes it
/// again when it registers anew). 0: not draining.
#[derive(Debug, Clone)]
pub(crate) struct DrainMark(Arc<tokio::sync::watch::Sender<i64>>);

impl Default for DrainMark {
    fn default() -> Self {
        DrainMark(Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl DrainMark {
    pub fn since(&self) -> Option<i64> {
        match *self.0.borrow() {
            0 => None,
            at => Some(at),
        }
    }

    /// Marks the node draining from `at_ms`; `false` when it was already.
    pub fn start(&self, at_ms: i64) -> bool {
        self.0.send_if_modified(|v| {
            let first = *v == 0;
            if first {
                *v = at_ms.max(1);
            }
            first
        })
    }

    /// Resolves once the node drains.
    pub async fn started(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|v| *v != 0).await;
    }
}
