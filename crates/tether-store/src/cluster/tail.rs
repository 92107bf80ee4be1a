//! Every node follows every conversation live (issue 12, PostgreSQL only): events and
//! list changes committed by *another* node reach this node's followers.
//!
//! **Out.** After a commit, the committing node tells the others with a `NOTIFY` on
//! [`CHANNEL`]: per conversation, the newest event id it committed and whether the
//! conversation's list view may have changed ([`Notice`]). The commit path only queues
//! the notice ([`Outbound`], a channel send); a task of its own sends what queued up in
//! one statement, off the writer connection.
//!
//! **In.** Each node tails `events` for the conversations it has followers for (the
//! feed's topics, each with the id it is fed to, see `feed`): on a notice that names a
//! newer id, and by polling every [`TailOptions::poll`] as the fallback that alone still
//! delivers everything (a notice can be lost: a dropped listener connection, a node that
//! died between commit and notice). What it reads goes to the topics in id order, and a
//! topic takes only ids after its cursor, so a follower never gets an event twice or out
//! of order, whether it came from this node's commit or from the tail. List changes
//! (notices, and a poll of recently updated conversations) go to this node's
//! conversation-list followers.
//!
//! **Why per conversation.** Ids come from one sequence but nodes commit concurrently,
//! so across conversations ids are not in commit order; within one they are, because
//! only its owner appends its events (a claim comes after the previous owner's last
//! commit, and a claim syncs the tail of that conversation first:
//! [`Cluster::claim_conversation`](crate::Cluster::claim_conversation)).
//!
//! SQLite has no tail: nothing here runs, and the commit path pays one empty
//! `OnceLock` look-up.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tether_proto::{ConversationId, EventEnvelope};
use tokio::sync::mpsc;

use crate::backend::Backend;
use crate::{Claim, Result, Store};

/// The `LISTEN`/`NOTIFY` channel of commit notices.
pub(crate) const CHANNEL: &str = "tether_events";

/// How a node tails the others' commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailOptions {
    /// How often the tail reads the store without a notice (the fallback).
    pub poll: Duration,
    /// Whether to send and listen for notices (off: polling alone, for tests).
    pub notify: bool,
}

impl Default for TailOptions {
    fn default() -> TailOptions {
        TailOptions {
            poll: Duration::from_millis(500),
            notify: true,
        }
    }
}

/// What the tail did so far (for `GET /api/v1/runtime` and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailStats {
    /// Notices sent to the other nodes (one per conversation per send).
    pub notices_sent: u64,
    /// Notices received from other nodes.
    pub notices_received: u64,
    /// Events of other nodes' commits handed to this node's followers.
    pub events_tailed: u64,
    /// Reads of the store by the poll.
    pub polls: u64,
}

/// One conversation's commit, as the `NOTIFY` payload carries it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Notice {
    /// The sending store (a node ignores its own notices).
    pub o: u64,
    /// Conversation id.
    pub c: String,
    /// The newest event id committed (0: no event, a list change only).
    pub e: i64,
    /// Whether the conversation's list view may have changed.
    #[serde(default)]
    pub l: bool,
}

/// What the commit path queues for the notifier.
#[derive(Debug)]
pub(crate) enum Committed {
    Events(ConversationId, i64),
    Changed(ConversationId),
}

/// The tail's parts the commit path and the store share (in `Shared`).
#[derive(Default)]
pub(crate) struct Outbound {
    /// Set when the tail starts with notices on (PostgreSQL only).
    tx: OnceLock<mpsc::UnboundedSender<Committed>>,
    /// This store's id in notices.
    origin: OnceLock<u64>,
    pub(crate) notices_sent: AtomicU64,
    pub(crate) notices_received: AtomicU64,
    pub(crate) events_tailed: AtomicU64,
    pub(crate) polls: AtomicU64,
}

impl Outbound {
    /// Starts queueing notices (once; a second start keeps the first).
    pub(crate) fn open(&self, origin: u64) -> Option<mpsc::UnboundedReceiver<Committed>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.tx.set(tx).ok()?;
        let _ = self.origin.set(origin);
        Some(rx)
    }

    pub(crate) fn origin(&self) -> u64 {
        self.origin.get().copied().unwrap_or(0)
    }

    /// A commit appended `events` (any conversations; called after it committed).
    pub(crate) fn events(&self, events: &[EventEnvelope]) {
        let Some(tx) = self.tx.get() else {
            return;
        };
        let mut rest = events;
        while let Some(first) = rest.first() {
            let conv = &first.conversation_id;
            let n = rest
                .iter()
                .position(|e| e.conversation_id != *conv)
                .unwrap_or(rest.len());
            let last = rest[..n].iter().map(|e| e.id).max().unwrap_or(0);
            let _ = tx.send(Committed::Events(conv.clone(), last));
            rest = &rest[n..];
        }
    }

    /// Conversation `id`'s list view may have changed (called after the write committed).
    pub(crate) fn changed(&self, id: &ConversationId) {
        if let Some(tx) = self.tx.get() {
            let _ = tx.send(Committed::Changed(id.clone()));
        }
    }

    pub(crate) fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The running tail of a store; dropping it stops it.
#[derive(Debug)]
pub struct TailHandle {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TailHandle {
    pub(crate) fn new(tasks: Vec<tokio::task::JoinHandle<()>>) -> TailHandle {
        TailHandle { tasks }
    }
}

impl Drop for TailHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Store {
    /// Starts following other nodes' commits (see the module header): `None` on SQLite,
    /// which is one node.
    pub async fn start_tail(&self, options: TailOptions) -> Result<Option<TailHandle>> {
        match self.backend() {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => db.start_tail(options).await.map(Some),
        }
    }

    /// What the tail did so far (all zero on SQLite).
    pub fn tail_stats(&self) -> TailStats {
        let o = &self.shared().outbound;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TailStats {
            notices_sent: get(&o.notices_sent),
            notices_received: get(&o.notices_received),
            events_tailed: get(&o.events_tailed),
            polls: get(&o.polls),
        }
    }

    async fn sync_tail(&self, id: &ConversationId) {
        if let Backend::Postgres(db) = self.backend()
            && let Err(e) = db.tail_one(id).await
        {
            tracing::warn!(conversation_id = %id, error = %e, "cannot read the previous owner's events");
        }
    }
}

impl crate::Cluster<'_> {
    /// Claims conversation `id` for node `node_id` at `now_ms`: it becomes this node's
    /// under a new epoch when it had no owner or its owner's lease ended; a node that owns
    /// it already keeps its epoch; another live owner keeps it.
    ///
    /// A new claim first hands this node's followers what the previous owner committed
    /// and the tail has not brought yet: from now on this node's own commits feed them,
    /// and an older event arriving after those would be skipped.
    pub async fn claim_conversation(
        self,
        id: &ConversationId,
        node_id: &str,
        now_ms: i64,
    ) -> Result<Claim> {
        let claim = match self.store.backend() {
            Backend::Sqlite(db) => return db.claim_conversation(id, node_id, now_ms).await,
            Backend::Postgres(db) => db.claim_conversation(id, node_id, now_ms).await?,
        };
        if matches!(claim, Claim::Claimed { .. }) {
            self.store.sync_tail(id).await;
        }
        Ok(claim)
    }

    /// Takes conversation `id` over for `node_id` if its epoch is still `from_epoch`
    /// (failover, or a node restarting under its own id): the new epoch, or `None` when
    /// someone claimed it in between. Like a claim, it syncs the tail first.
    pub async fn take_over_conversation(
        self,
        id: &ConversationId,
        node_id: &str,
        from_epoch: i64,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        let taken = match self.store.backend() {
            Backend::Sqlite(db) => {
                return db
                    .take_over_conversation(id, node_id, from_epoch, now_ms)
                    .await;
            }
            Backend::Postgres(db) => {
                db.take_over_conversation(id, node_id, from_epoch, now_ms)
                    .await?
            }
        };
        if taken.is_some() {
            self.store.sync_tail(id).await;
        }
        Ok(taken)
    }
}
