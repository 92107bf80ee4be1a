//! The durable intake every channel shares: accept → lane → handle → mark → replay.
//!
//! A delivery (a Telegram update, a Slack event, a Discord message, a Feishu event) is
//! recorded with its dedupe key and its payload in one transaction
//! (`Channels::accept_inbound`) before its transport is answered; a repeat is dropped there,
//! before any work. It is then routed: to its chat's lane (`lanes`: in arrival order
//! within a chat, chats in parallel), at once (a button press whose answer is awaited),
//! or nowhere. Once handled (the runtime has the message: its turn id comes from the
//! key, so a replay never runs it twice) it is marked handled; what a crash left
//! unhandled is routed again by [`Intake::replay`] at the next start. A delivery recorded
//! while the replay runs is routed once, by whichever comes first.
//!
//! Each platform supplies a [`Platform`]: its dedupe key, its stored payload and how one
//! is read back, where a delivery goes, and how a work item is handled and answered.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tether_store::StoreError;
use tokio::sync::{mpsc, watch};

use crate::core::SharedCore;

/// What a platform supplies to the intake.
#[async_trait::async_trait]
pub(crate) trait Platform: Send + Sync + Sized + 'static {
    /// One delivery as its transport hands it over (and as its stored payload reads back).
    type Delivery: Send + 'static;
    /// What a chat's lane (or [`Intake::now`]) handles.
    type Work: Send + 'static;
    /// What handling one work item gives (for [`Platform::follow_up`]).
    type Done: Send + 'static;
    /// What a new delivery's transport is answered once it is routed (Feishu's toast).
    type Answer: Send + 'static;

    /// What one delivery is called in the log (`update`, `event`).
    const NOUN: &'static str;
    /// New deliveries wait for the start-up replay before they are routed, so what a
    /// crash left unhandled goes first (Telegram's and Discord's order); without it they
    /// are routed at once (Slack replays only once the bot is identified).
    const AFTER_REPLAY: bool;

    /// The dedupe key of a delivery tether acts on (`None`: nothing to record).
    fn key(&self, d: &Self::Delivery) -> Option<String>;
    /// The payload kept with the key until the delivery is handled.
    fn payload(&self, d: &Self::Delivery) -> String;
    /// A kept payload read back (`Err`: unreadable; it is marked handled and dropped).
    fn read(&self, payload: &str) -> Result<Self::Delivery, String>;
    /// Hands a recorded delivery on: to its chat's lane ([`Intake::lane`]), at once
    /// ([`Intake::now`]), or nowhere ([`Intake::handled`]). `replay`: it was recorded
    /// before the last stop.
    async fn route(
        &self,
        intake: &Intake<Self>,
        key: String,
        d: Self::Delivery,
        replay: bool,
    ) -> Self::Answer;
    /// Handles one work item; the intake marks it handled afterwards.
    async fn handle(&self, work: Self::Work) -> Self::Done;
    /// What a lane does once the item is marked handled (answer a button press).
    async fn follow_up(&self, done: Self::Done) {
        let _ = done;
    }
}

/// Which keys the start-up replay and new deliveries have routed, so each is routed once.
#[derive(Default)]
struct Gate {
    /// The replay has finished.
    done: bool,
    /// Routed as new while the replay runs (the replay skips them).
    accepted: HashSet<String>,
    /// Routed by the replay (a new delivery with the key is not routed again).
    replayed: HashSet<String>,
}

impl Gate {
    /// A new delivery may be routed (the replay has not routed it).
    fn admit_new(&mut self, key: &str) -> bool {
        if self.replayed.remove(key) {
            return false;
        }
        if !self.done {
            self.accepted.insert(key.to_owned());
        }
        true
    }

    /// The replay may route a recorded delivery (it was not routed as new meanwhile).
    fn admit_replayed(&mut self, key: &str) -> bool {
        if self.accepted.contains(key) {
            return false;
        }
        self.replayed.insert(key.to_owned());
        true
    }

    fn finish(&mut self) {
        self.done = true;
        self.accepted.clear();
    }
}

struct Shared<P> {
    platform: P,
    core: SharedCore,
    gate: Mutex<Gate>,
    replay_done: watch::Sender<bool>,
}

impl<P: Platform> Shared<P> {
    async fn handled(&self, key: &str) {
        if let Err(e) = self
            .core
            .store
            .channels()
            .mark_inbound_handled(self.core.name(), key)
            .await
        {
            tracing::warn!(channel = self.core.name(), key, "cannot mark handled: {e}");
        }
    }

    async fn run(&self, key: String, work: P::Work) -> P::Done {
        let done = self.platform.handle(work).await;
        // The runtime has the message: a replay would not run it again, and it need not
        // be replayed.
        self.handled(&key).await;
        done
    }
}

/// One channel's intake (cheap to clone: its tasks and transports share it).
pub(crate) struct Intake<P: Platform> {
    shared: Arc<Shared<P>>,
    lanes: mpsc::UnboundedSender<(String, (String, P::Work))>,
}

impl<P: Platform> Clone for Intake<P> {
    fn clone(&self) -> Self {
        Intake {
            shared: self.shared.clone(),
            lanes: self.lanes.clone(),
        }
    }
}

impl<P: Platform> Intake<P> {
    /// The intake and its lanes task.
    pub fn start(core: SharedCore, platform: P) -> (Intake<P>, tokio::task::JoinHandle<()>) {
        let shared = Arc::new(Shared {
            platform,
            core,
            gate: Mutex::new(Gate::default()),
            replay_done: watch::Sender::new(false),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let handler = {
            let shared = shared.clone();
            move |(key, work): (String, P::Work)| {
                let shared = shared.clone();
                async move {
                    let done = shared.run(key, work).await;
                    shared.platform.follow_up(done).await;
                }
            }
        };
        let task = tokio::spawn(crate::lanes::run_lanes(rx, handler));
        (Intake { shared, lanes: tx }, task)
    }

    pub fn core(&self) -> &SharedCore {
        &self.shared.core
    }

    pub fn platform(&self) -> &P {
        &self.shared.platform
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.shared.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a key that is only deduplicated (a request's signature, a message seen
    /// over two event kinds); `true` when it is new.
    pub async fn remember(&self, key: &str) -> Result<bool, StoreError> {
        self.core()
            .store
            .channels()
            .remember_inbound(self.core().name(), key)
            .await
    }

    /// Records and routes one delivery, keeping it until it is handled. `Ok(None)`: a
    /// repeat, or nothing tether acts on. `Err`: it could not be recorded, so it must not
    /// be acknowledged (the platform delivers it again).
    pub async fn accept(&self, d: P::Delivery) -> Result<Option<P::Answer>, StoreError> {
        let platform = self.platform();
        let Some(key) = platform.key(&d) else {
            return Ok(None);
        };
        let channel = self.core().name();
        match self
            .core()
            .store
            .channels()
            .accept_inbound(channel, &key, &platform.payload(&d))
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(channel, key, "duplicate {} ignored", P::NOUN);
                return Ok(None);
            }
            Err(e) => {
                tracing::warn!(channel, key, "cannot record {}: {e}", P::NOUN);
                return Err(e);
            }
        }
        if P::AFTER_REPLAY {
            let mut done = self.shared.replay_done.subscribe();
            let _ = done.wait_for(|d| *d).await;
        }
        if !self.gate().admit_new(&key) {
            return Ok(None);
        }
        Ok(Some(platform.route(self, key, d, false).await))
    }

    /// Routes again what was recorded before the last stop and never handled, in the
    /// order it was recorded.
    pub async fn replay(&self) {
        let channel = self.core().name();
        let pending = match self
            .core()
            .store
            .channels()
            .unhandled_inbound(channel)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(channel, "cannot read unhandled {}s: {e}", P::NOUN);
                Vec::new()
            }
        };
        for p in pending {
            if !self.gate().admit_replayed(&p.key) {
                continue;
            }
            match self.platform().read(&p.payload) {
                Ok(d) => {
                    tracing::info!(channel, key = p.key, "replaying a recorded {}", P::NOUN);
                    self.platform().route(self, p.key, d, true).await;
                }
                Err(e) => {
                    tracing::warn!(channel, key = p.key, "recorded {} unreadable: {e}", P::NOUN);
                    self.handled(&p.key).await;
                }
            }
        }
        self.gate().finish();
        self.shared.replay_done.send_replace(true);
    }

    /// Queues `work` (recorded as `key`) in the lane `lane`: handled after what the lane
    /// holds, then marked handled and followed up.
    pub fn lane(&self, lane: String, key: String, work: P::Work) {
        let _ = self.lanes.send((lane, (key, work)));
    }

    /// Handles `work` (recorded as `key`) now, outside the lanes, and marks it handled;
    /// the job gives what handling gave.
    pub fn now(&self, key: String, work: P::Work) -> tokio::task::JoinHandle<P::Done> {
        let shared = self.shared.clone();
        tokio::spawn(async move { shared.run(key, work).await })
    }

    /// The delivery recorded as `key` needs nothing more: it will not be replayed.
    pub async fn handled(&self, key: &str) {
        self.shared.handled(key).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_both_replayed_and_delivered_anew_is_routed_once() {
        let mut gate = Gate::default();
        // Delivered anew while the replay runs, before the replay reaches it.
        assert!(gate.admit_new("1"));
        assert!(!gate.admit_replayed("1"));
        // Replayed first, then delivered anew (it was in both).
        assert!(gate.admit_replayed("2"));
        assert!(!gate.admit_new("2"));
        // Only replayed, or only new.
        assert!(gate.admit_replayed("3"));
        gate.finish();
        assert!(gate.admit_new("4"));
        assert!(gate.accepted.is_empty(), "after the replay nothing is kept");
        // A repeat of a replayed key is dropped once, then admitted (the store's dedupe
        // has the last word on repeats).
        assert!(!gate.admit_new("3"));
        assert!(gate.admit_new("3"));
    }
}
