//! The way to the delegation watcher (`watch.rs`): the list of tasks to follow, kept in
//! `Ctx`. Imports nothing else of the crate, so `Ctx` does not reach back to `Runtime`
//! through the watcher.

use std::sync::Mutex;

use tether_proto::TaskId;
use tether_store::Follower;
use tokio::sync::mpsc;

/// What the watcher is told: a task to follow, or one released for good.
pub(crate) enum WatchCmd {
    Follow(TaskId, Follower),
    Forget(TaskId),
}

/// The way to the watcher (in `Ctx`; the watcher takes the receiving end at start).
pub(crate) struct WatchList {
    tx: mpsc::UnboundedSender<WatchCmd>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<WatchCmd>>>,
}

impl WatchList {
    pub fn new() -> WatchList {
        let (tx, rx) = mpsc::unbounded_channel();
        WatchList {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    pub(super) fn send(&self, cmd: WatchCmd) {
        // The watcher ends only with the runtime.
        let _ = self.tx.send(cmd);
    }

    pub(super) fn take(&self) -> Option<mpsc::UnboundedReceiver<WatchCmd>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
