//! What stays on a shared process after a session leaves it (issue 33 item 4): codex
//! keeps an unsubscribed thread loaded, with the MCP servers it was opened with, until
//! the process ends. [`Parked`] tells the runtime when that happens (so the session's MCP
//! token can live exactly as long as the thread that holds it), and [`Left`] remembers
//! which process a session left and with which configuration, so its resume can go back
//! there without opening its MCP servers again.

use std::sync::{Arc, Weak};

use tokio::sync::watch;

use super::Host;

/// Ends when the shared process a session's thread stays loaded on ends (its exit, its
/// idle end, the daemon's shutdown, or the last handle on it dropped).
#[derive(Debug, Clone)]
pub struct Parked {
    process: u64,
    ended: watch::Receiver<bool>,
}

impl Parked {
    /// A signal of one's own (what waits on a parked thread, tested without a process):
    /// it ends when `ended` turns true or its sender is dropped.
    pub fn new(process: u64, ended: watch::Receiver<bool>) -> Parked {
        Parked { process, ended }
    }

    /// The shared process's id (as in [`crate::ProcessView::id`]).
    pub fn process(&self) -> u64 {
        self.process
    }

    /// Waits until the process has ended.
    pub async fn ended(mut self) {
        // An error: the sender is gone with the process's last handle.
        let _ = self.ended.wait_for(|ended| *ended).await;
    }
}

/// The signal behind [`Parked`]: set once when the process ends.
#[derive(Debug, Clone)]
pub(crate) struct Ended(Arc<watch::Sender<bool>>);

impl Ended {
    pub fn new() -> Ended {
        Ended(Arc::new(watch::channel(false).0))
    }

    pub fn set(&self) {
        self.0.send_replace(true);
    }

    pub fn parked(&self, process: u64) -> Parked {
        Parked {
            process,
            ended: self.0.subscribe(),
        }
    }
}

/// The process a session left last, and the configuration its thread was opened with
/// there (a driver's fingerprint of it; `None`: not recorded).
#[derive(Debug)]
pub(crate) struct Left {
    pub host: Weak<Host>,
    pub config: Option<String>,
}
