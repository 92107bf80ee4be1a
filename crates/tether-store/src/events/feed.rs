//! The event feed: the one way anything reads events live ([`Events::follow`](crate::Events::follow)).
//!
//! **Order.** Events are published by the store itself, at commit, while the writer
//! connection is still held ([`Store::commit_events`]). There is one writer, so publication
//! order is commit order is `id` order, for every conversation: two sessions of one
//! conversation can never be published out of order. On PostgreSQL, events another node
//! committed come from this node's tail of the store (`tail`), in `id` order per
//! conversation (only its owner appends them); each topic keeps the id it was fed to
//! and takes only newer ones, whichever way they come.
//!
//! **Fan-out.** The feed keeps one topic per *followed* conversation: a broadcast channel
//! of [`Batch`]es (one commit's events of that conversation, shared behind an `Arc`). A
//! commit of a conversation nobody follows costs one map look-up; the topic goes away when
//! its last follower does.
//!
//! **Followers.** A [`Follower`] joins the topic first, then reads the store after its
//! resume point up to the conversation's newest event at that moment (the gap: what
//! commits later is in the channel, so a fill never chases a busy conversation); from
//! then on it hands over the batches it receives, skipping what it already delivered. If
//! it falls behind the channel (`Lagged`), it fills again from the last event it
//! delivered up to the newest one. So a follower never sees a gap or a duplicate, and
//! reads the store only at the start and after lagging, never per event.
//!
//! **Resume point.** An event `id` (the SSE id): a follower delivers the events of its
//! scope with `id > after`. Within a conversation ids increase in commit order, so an id
//! is an exact per-conversation resume point (and a session's `seq` order is its id order).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tether_proto::{ConversationId, EventEnvelope, EventPayload, SessionId};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::{Result, Store, StoreError};

/// Batches buffered per followed conversation before a slow follower lags (and then
/// re-reads the store). A batch is one commit (up to the actor's coalescing size).
const TOPIC_CAPACITY: usize = 512;
/// Events read from the store per page while filling a gap.
const FILL_PAGE: u32 = 256;

/// What a follower follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every event of the conversation, across its sessions.
    Conversation(ConversationId),
    /// The events of one runtime session.
    Session(SessionId),
}

/// Events of one conversation from one commit (or one page read from the store), in `id`
/// order. Shared by every follower that hands it over whole.
#[derive(Debug)]
pub struct Batch {
    events: Vec<EventEnvelope>,
    encoded: OnceLock<Bytes>,
}

impl Batch {
    fn new(events: Vec<EventEnvelope>) -> Batch {
        Batch {
            events,
            encoded: OnceLock::new(),
        }
    }

    pub fn events(&self) -> &[EventEnvelope] {
        &self.events
    }

    /// The batch as its followers send it on, encoded once by the first of them and
    /// shared by the rest (1 000 streams of one conversation encode each event once).
    /// There is one encoding per batch: every caller must pass the same `encode`.
    pub fn encoded(&self, encode: impl FnOnce(&[EventEnvelope]) -> Bytes) -> Bytes {
        self.encoded.get_or_init(|| encode(&self.events)).clone()
    }

    fn last_id(&self) -> i64 {
        self.events.last().map_or(0, |e| e.id)
    }
}

/// One followed conversation's topic.
struct Topic {
    tx: broadcast::Sender<Arc<Batch>>,
    /// The newest event id handed to the topic or covered by a follower's fill: what a
    /// tail of other nodes' commits (`tail`) reads after. `None` until the first
    /// follower's fill has read where the store ends (the tail waits for that: before,
    /// it could skip events that fill does not read).
    cursor: Option<i64>,
}

/// The topics of followed conversations.
#[derive(Default)]
pub(crate) struct Hub {
    topics: Mutex<HashMap<ConversationId, Topic>>,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConversationId, Topic>> {
        self.topics.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn join(&self, conversation_id: &ConversationId) -> broadcast::Receiver<Arc<Batch>> {
        let mut topics = self.lock();
        match topics.get(conversation_id) {
            Some(topic) => topic.tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(TOPIC_CAPACITY);
                topics.insert(conversation_id.clone(), Topic { tx, cursor: None });
                rx
            }
        }
    }

    /// Called after a follower's receiver was dropped: the last one out removes the topic.
    fn leave(&self, conversation_id: &ConversationId) {
        let mut topics = self.lock();
        if topics
            .get(conversation_id)
            .is_some_and(|topic| topic.tx.receiver_count() == 0)
        {
            topics.remove(conversation_id);
        }
    }

    /// A follower's fill reads the store up to `until`: from there on the topic must be
    /// fed (by this node's commits, or by the tail of other nodes' commits).
    fn cover(&self, conversation_id: &ConversationId, until: i64) {
        if let Some(topic) = self.lock().get_mut(conversation_id) {
            topic.cursor.get_or_insert(until);
        }
    }

    /// How many followers conversation `id` has on this node.
    fn followers(&self, id: &ConversationId) -> usize {
        self.lock()
            .get(id)
            .map_or(0, |topic| topic.tx.receiver_count())
    }

    /// Conversations with a topic (for tests and figures).
    pub(crate) fn followed(&self) -> usize {
        self.lock().len()
    }

    /// Each followed conversation whose fill has begun, with the id its topic is fed to.
    pub(crate) fn cursors(&self) -> Vec<(ConversationId, i64)> {
        self.lock()
            .iter()
            .filter_map(|(id, topic)| topic.cursor.map(|c| (id.clone(), c)))
            .collect()
    }

    /// The id conversation `id`'s topic is fed to (`None`: not followed, or its fill has
    /// not begun).
    pub(crate) fn cursor(&self, id: &ConversationId) -> Option<i64> {
        self.lock().get(id).and_then(|topic| topic.cursor)
    }

    /// Hands events another node committed (read from the store, one conversation's, in
    /// `id` order) to the conversation's followers: only those after the topic's cursor,
    /// so an event reaches a topic once whichever way it came. Sent under the map's lock,
    /// so two tails of one conversation cannot cross.
    pub(crate) fn publish_remote(&self, id: &ConversationId, events: Vec<EventEnvelope>) -> usize {
        let mut topics = self.lock();
        let Some(topic) = topics.get_mut(id) else {
            return 0;
        };
        let Some(cursor) = topic.cursor else {
            return 0;
        };
        let fresh: Vec<EventEnvelope> = events.into_iter().filter(|e| e.id > cursor).collect();
        let Some(last) = fresh.last().map(|e| e.id) else {
            return 0;
        };
        topic.cursor = Some(last);
        let n = fresh.len();
        let _ = topic.tx.send(Arc::new(Batch::new(fresh)));
        n
    }

    /// Hands committed events to their conversations' followers; returns the
    /// conversations whose list view may have changed (a commit with more than streamed
    /// output). Runs under the writer connection, so it must stay cheap: one look-up per
    /// conversation in the commit, and a copy of the events only for followed ones.
    pub(crate) fn publish(&self, events: &[EventEnvelope]) -> Vec<ConversationId> {
        let mut changed: Vec<ConversationId> = Vec::new();
        let mut sends = Vec::new();
        {
            let mut topics = self.lock();
            let mut rest = events;
            while let Some(first) = rest.first() {
                // A commit is nearly always one conversation's; split it where it changes.
                let conv = &first.conversation_id;
                let n = rest
                    .iter()
                    .position(|e| e.conversation_id != *conv)
                    .unwrap_or(rest.len());
                let (group, tail) = rest.split_at(n);
                rest = tail;
                if group.iter().any(|e| !is_streamed(&e.payload))
                    && !changed.iter().any(|c| c == conv)
                {
                    changed.push(conv.clone());
                }
                if let Some(topic) = topics.get_mut(conv) {
                    let last = group.last().map_or(0, |e| e.id);
                    topic.cursor = Some(topic.cursor.map_or(last, |c| c.max(last)));
                    sends.push((topic.tx.clone(), group));
                }
            }
        }
        // Copied and sent outside the map's lock (joins and leaves do not wait), still
        // under the writer connection (so in commit order).
        for (tx, group) in sends {
            // No receiver left is fine: the topic goes with its last follower.
            let _ = tx.send(Arc::new(Batch::new(group.to_vec())));
        }
        changed
    }
}

/// Agent output that never changes what a conversation list shows.
fn is_streamed(p: &EventPayload) -> bool {
    matches!(
        p,
        EventPayload::MessageDelta { .. }
            | EventPayload::ThoughtDelta { .. }
            | EventPayload::ToolCall { .. }
            | EventPayload::ToolCallUpdate { .. }
    )
}

/// A live reader of one scope's events (see the module header). Dropping it leaves the
/// feed.
pub struct Follower {
    store: Store,
    conversation_id: ConversationId,
    session_id: Option<SessionId>,
    rx: Option<broadcast::Receiver<Arc<Batch>>>,
    /// Id of the last event delivered (or the resume point).
    last: i64,
    /// Whether the store may hold events after `last` that the channel does not.
    filling: bool,
    /// While filling: the last id the store must be read to (the newest event of the
    /// conversation when the fill began; what commits later is in the channel). `None`
    /// until the fill reads it, after joining or lagging.
    fill_until: Option<i64>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("conversation_id", &self.conversation_id)
            .field("session_id", &self.session_id)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        drop(self.rx.take());
        self.store.shared().feed.leave(&self.conversation_id);
    }
}

impl Follower {
    /// The id of the last event delivered (or the resume point).
    pub fn last_id(&self) -> i64 {
        self.last
    }

    /// The follower as a stream of what [`Follower::next`] returns (for merging several).
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Arc<Batch>>> + Send + 'static {
        futures::stream::unfold(self, |mut f| async move {
            let got = f.next().await;
            Some((got, f))
        })
    }

    /// The next events of the scope after the last delivered, in commit order (never
    /// empty). Waits for them; an error is the store's, when filling a gap failed (the
    /// follower can be asked again). Cancel-safe: a dropped call loses nothing.
    pub async fn next(&mut self) -> Result<Arc<Batch>> {
        loop {
            if self.filling {
                let until = match self.fill_until {
                    Some(until) => until,
                    None => {
                        let until = self
                            .store
                            .events()
                            .newest_event_id(&self.conversation_id)
                            .await?;
                        self.store.shared().feed.cover(&self.conversation_id, until);
                        self.fill_until = Some(until);
                        until
                    }
                };
                // Bounded by `until`, a fill never chases a conversation that keeps
                // committing: that part comes from the channel.
                let page = if self.last < until {
                    self.read_store(until).await?
                } else {
                    Vec::new()
                };
                if page.len() < FILL_PAGE as usize {
                    self.filling = false;
                    self.fill_until = None;
                }
                if let Some(last) = page.last() {
                    self.last = self.last.max(last.id);
                    return Ok(Arc::new(Batch::new(page)));
                }
            }
            let Some(rx) = self.rx.as_mut() else {
                return Err(StoreError::FeedClosed);
            };
            match rx.recv().await {
                Ok(batch) => {
                    if let Some(batch) = self.fresh(batch) {
                        return Ok(batch);
                    }
                }
                Err(RecvError::Lagged(skipped)) => {
                    tracing::debug!(
                        conversation_id = %self.conversation_id,
                        skipped,
                        "feed follower lagged; reading the store"
                    );
                    self.filling = true;
                    self.fill_until = None;
                }
                // The topic's sender lives as long as a receiver does.
                Err(RecvError::Closed) => return Err(StoreError::FeedClosed),
            }
        }
    }

    /// How many followers its conversation has on this node (itself included).
    pub fn followers(&self) -> usize {
        self.store.shared().feed.followers(&self.conversation_id)
    }

    /// Whether the follower is reading the store (catching up from its resume point or
    /// after lagging): its next batches are pages read from the store.
    pub fn is_filling(&self) -> bool {
        self.filling
    }

    /// The next events already waiting in the channel, without waiting (`None`: none
    /// yet, or the follower must read the store first, which [`Follower::next`] does).
    /// Lets a slow reader take several batches in one write.
    pub fn try_next(&mut self) -> Option<Arc<Batch>> {
        if self.filling {
            return None;
        }
        loop {
            match self.rx.as_mut()?.try_recv() {
                Ok(batch) => {
                    if let Some(batch) = self.fresh(batch) {
                        return Some(batch);
                    }
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    self.filling = true;
                    self.fill_until = None;
                    return None;
                }
                Err(
                    broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed,
                ) => return None,
            }
        }
    }

    /// What of `batch` this follower has not delivered and its scope wants: the batch
    /// itself when all of it (the common case: no copy), else a copy of that part.
    fn fresh(&mut self, batch: Arc<Batch>) -> Option<Arc<Batch>> {
        let last = self.last;
        if batch.last_id() <= last {
            return None;
        }
        self.last = batch.last_id();
        if self.session_id.is_none() && batch.events.first().is_some_and(|e| e.id > last) {
            return Some(batch);
        }
        let wanted = |e: &EventEnvelope| {
            e.id > last && self.session_id.as_ref().is_none_or(|s| *s == e.session_id)
        };
        if batch.events.iter().all(wanted) {
            return Some(batch);
        }
        let part: Vec<EventEnvelope> = batch.events.iter().filter(|e| wanted(e)).cloned().collect();
        (!part.is_empty()).then(|| Arc::new(Batch::new(part)))
    }

    /// The next page of the scope's stored events after `last`, up to id `until`.
    async fn read_store(&self, until: i64) -> Result<Vec<EventEnvelope>> {
        self.store
            .events()
            .events_window(
                &self.conversation_id,
                self.session_id.as_ref(),
                self.last,
                until,
                FILL_PAGE,
            )
            .await
    }
}

impl crate::Events<'_> {
    /// Follows `scope` live from after event id `after` (0: from the beginning; see the
    /// module header). A session that does not exist is `RowNotFound`; a conversation is
    /// not checked (followers of one not created yet see its events once it is).
    pub async fn follow(self, scope: Scope, after: i64) -> Result<Follower> {
        let (conversation_id, session_id) = match scope {
            Scope::Conversation(id) => (id, None),
            Scope::Session(sid) => {
                let Some(conv) = self.session_conversation(&sid).await? else {
                    return Err(sqlx::Error::RowNotFound.into());
                };
                (conv, Some(sid))
            }
        };
        // Join before reading the store: whatever commits from now on is in the channel,
        // whatever committed before is in the store.
        let rx = self.store.shared().feed.join(&conversation_id);
        Ok(Follower {
            store: self.store.clone(),
            conversation_id,
            session_id,
            rx: Some(rx),
            last: after.max(0),
            filling: true,
            fill_until: None,
        })
    }

    /// Follows `scope` from now on: events committed before the call are not delivered.
    pub async fn follow_from_now(self, scope: Scope) -> Result<Follower> {
        let mut f = self.follow(scope, 0).await?;
        // Joined first, so whatever commits after this read is in the channel.
        f.last = self.newest_event_id(&f.conversation_id).await?;
        self.store.shared().feed.cover(&f.conversation_id, f.last);
        f.filling = false;
        Ok(f)
    }

    /// Conversations that have at least one follower.
    pub fn followed_conversations(self) -> usize {
        self.store.shared().feed.followed()
    }
}
