//! Group commit of streamed events: [`Events::append_events`](crate::Events::append_events)
//! of every session that waits for the writer at the same moment share one transaction.
//!
//! A busy daemon has many session actors storing small batches at once (a batch holds
//! what one agent streamed within the coalescing window, often one or two deltas). One
//! transaction each would pay, per batch, `BEGIN`, the session's counter, the `INSERT`
//! and `COMMIT` (four round trips to sqlx's SQLite thread) and a WAL commit that rewrites
//! the same index pages. Instead a caller queues its batch and waits for the writer
//! connection; whoever gets it first (the leader) takes every batch queued by then and
//! stores them all in one transaction: one `UPDATE` of every session's counter, multi-row
//! `INSERT`s across sessions, one `COMMIT`. It publishes them in that commit (so the
//! feed's commit order holds) and answers each waiter; a waiter that gets the writer and
//! finds its answer already there gives it back at once. Uncontended, an append costs
//! what it did before (one statement for one event).
//!
//! Each batch stays atomic and in its session's order: a group only ever adds whole
//! batches, and one session's batches are taken in the order they were queued. If the
//! group fails (say one session is gone), it is rolled back and every batch of it is
//! stored on its own, so one bad batch fails only its own caller.
//!
//! Durability is unchanged: a caller is answered (and anyone told) only after the commit
//! that holds its events. The commit runs in a task of its own, so a leader whose caller
//! goes away mid-commit still stores (or refuses) everyone's batches.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tether_proto::{EventEnvelope, EventPayload, SessionId, TurnId};
use tokio::sync::oneshot;

use crate::Result;

/// Most events one group commit takes (the rest wait for the next one): bounds how long
/// the writer is held and how big one transaction gets.
pub(crate) const MAX_GROUP_EVENTS: usize = 4096;

/// One caller's batch, waiting for a group commit.
pub(crate) struct Pending {
    /// Tells it from the others (see [`Appends::withdraw`]).
    pub(crate) id: u64,
    pub(crate) session_id: SessionId,
    pub(crate) turn_id: Option<TurnId>,
    pub(crate) payloads: Vec<EventPayload>,
    pub(crate) reply: oneshot::Sender<Result<Vec<EventEnvelope>>>,
}

/// The batches waiting for the writer.
#[derive(Default)]
pub(crate) struct Appends {
    queue: Mutex<VecDeque<Pending>>,
    commits: AtomicU64,
    batches: AtomicU64,
    next_id: AtomicU64,
}

/// How appends were grouped since the store opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppendStats {
    /// Transactions (group commits) that stored batches.
    pub commits: u64,
    /// Batches (calls of [`Events::append_events`](crate::Events::append_events)) stored
    /// by them.
    pub batches: u64,
}

impl Appends {
    /// How appends were grouped so far.
    pub(crate) fn stats(&self) -> AppendStats {
        AppendStats {
            commits: self.commits.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Pending>> {
        // A panic while holding this lock leaves a consistent queue (push and drain).
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh id for a [`Pending`].
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn push(&self, p: Pending) {
        self.lock().push_back(p);
    }

    /// Whether batch `id` still waits in the queue (not yet taken by a group).
    pub(crate) fn is_queued(&self, id: u64) -> bool {
        self.lock().iter().any(|p| p.id == id)
    }

    /// Takes batch `id` back out of the queue if no group has taken it yet (its caller
    /// gives up without a writer: the store is unreachable); `false` when a group holds
    /// it already (then it is answered as usual).
    pub(crate) fn withdraw(&self, id: u64) -> bool {
        let mut q = self.lock();
        match q.iter().position(|p| p.id == id) {
            Some(i) => {
                q.remove(i);
                true
            }
            None => false,
        }
    }

    /// The oldest batches, up to [`MAX_GROUP_EVENTS`] events (at least one batch).
    pub(crate) fn take(&self) -> Vec<Pending> {
        let mut q = self.lock();
        let mut n = 0;
        let mut group = Vec::new();
        while let Some(p) = q.front() {
            if !group.is_empty() && n + p.payloads.len() > MAX_GROUP_EVENTS {
                break;
            }
            n += p.payloads.len();
            group.extend(q.pop_front());
        }
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.batches
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        group
    }
}
