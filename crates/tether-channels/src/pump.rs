//! The event pump: turns each mapped conversation's events into outbox rows. Every chat
//! keeps a cursor (the last event id handled); rows and the cursor are written in one
//! transaction, so after a crash or restart the pump resumes exactly where it stopped —
//! including the restart notices written by recovery before the channels started.
//!
//! A conversation carried into chats on several channels (`/here`) replies to the one
//! its latest message came from; the others stay quiet (`muted`, read at each turn's
//! start) while their cursors move on.
//!
//! Each mapped chat follows its conversation from its cursor ([`Runtime::follow`]): the
//! follower hands over each commit's events in order and reads the store only to catch
//! up, so nothing is missed or handled twice. A chat whose events could not be turned
//! into rows is followed again from its cursor at the next tick.
//!
//! [`Runtime::follow`]: tether_runtime::Runtime::follow

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::Stream;
use tether_proto::{ConversationId, EventEnvelope, EventPayload};
use tether_runtime::{Batch, RuntimeError, Scope};
use tether_store::{ChannelChat, now_ms};
use tokio_stream::{StreamExt, StreamMap};

use crate::ChannelError;
use crate::core::SharedCore;
use crate::progress::Progress;
use crate::render::{render, status_edit};

type ChatFeed = Pin<Box<dyn Stream<Item = tether_store::Result<Arc<Batch>>> + Send>>;

/// The followed chats (by conversation id) and those to follow again at the next tick.
struct Feeds {
    live: StreamMap<ConversationId, ChatFeed>,
    retry: BTreeSet<ConversationId>,
}

/// Runs until the task is aborted.
pub(crate) async fn run(core: SharedCore) {
    let mut progress = Progress::default();
    let mut traces = Traces::default();
    let mut feeds = Feeds {
        live: StreamMap::new(),
        retry: BTreeSet::new(),
    };
    sync(&core, &mut feeds).await;
    let mut tick = tokio::time::interval(core.tuning.progress_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = core.chats_changed.notified() => sync(&core, &mut feeds).await,
            Some((conv, got)) = feeds.live.next() => {
                let handled = match got {
                    Ok(batch) => match core.chat_of(&conv) {
                        Some(chat) => {
                            handle(&core, (&mut progress, &mut traces), &chat, batch.events()).await
                        }
                        None => Ok(()),
                    },
                    Err(e) => Err(ChannelError::from(e)),
                };
                if let Err(e) = handled {
                    tracing::warn!(
                        channel = core.name(),
                        conversation = %conv,
                        "cannot turn events into messages: {e}"
                    );
                    feeds.live.remove(&conv);
                    feeds.retry.insert(conv);
                }
            }
            _ = tick.tick() => {
                if !feeds.retry.is_empty() {
                    feeds.retry.clear();
                    sync(&core, &mut feeds).await;
                }
                flush_progress(&core, &mut progress).await;
            }
        }
    }
}

/// Follows every mapped chat not followed yet (from its cursor), and stops following
/// the chats that are not mapped any more.
async fn sync(core: &SharedCore, feeds: &mut Feeds) {
    let chats = core.all_chats();
    let mapped: BTreeSet<&ConversationId> = chats.iter().map(|c| &c.conversation_id).collect();
    let gone: Vec<ConversationId> = feeds
        .live
        .keys()
        .filter(|k| !mapped.contains(k))
        .cloned()
        .collect();
    for k in gone {
        feeds.live.remove(&k);
    }
    for chat in &chats {
        let conv = &chat.conversation_id;
        if feeds.live.contains_key(conv) || feeds.retry.contains(conv) {
            continue;
        }
        match core
            .runtime
            .follow(Scope::Conversation(conv.clone()), chat.event_cursor)
            .await
        {
            Ok(f) => {
                feeds.live.insert(conv.clone(), Box::pin(f.into_stream()));
            }
            // A conversation that is gone has nothing more to say.
            Err(RuntimeError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(
                    channel = core.name(),
                    conversation = %conv,
                    "cannot follow a chat: {e}"
                );
                feeds.retry.insert(conv.clone());
            }
        }
    }
}

/// Turns a chat's next events into outbox rows and moves its cursor past them.
async fn handle(
    core: &SharedCore,
    (progress, traces): (&mut Progress, &mut Traces),
    chat: &ChannelChat,
    events: &[EventEnvelope],
) -> Result<(), ChannelError> {
    let caps = core.channel.capabilities();
    let Some(last) = events.last().map(|e| e.id) else {
        return Ok(());
    };
    let mut rows = Vec::new();
    let mut muted = chat.muted;
    for ev in events {
        // Replies go to the chat the conversation's latest message came from: whether
        // that is still this one is read as each turn starts (issue 28).
        if matches!(ev.payload, EventPayload::TurnStarted { .. }) {
            let now = core
                .store
                .channels()
                .channel_chat(core.name(), &chat.chat_key)
                .await?;
            muted = now.is_some_and(|c| c.muted && c.conversation_id == chat.conversation_id);
            core.set_muted(&chat.conversation_id, muted);
        }
        if muted {
            continue;
        }
        progress.observe(&chat.chat_key, ev);
        let traceparent = traces.of(ev);
        let approval = match &ev.payload {
            EventPayload::ApprovalResolved { approval_id, .. } => {
                core.store.requests().get_approval(approval_id).await?
            }
            _ => None,
        };
        for item in render(ev, approval.as_ref(), &caps, core.units) {
            let mut row = core.row(&chat.chat_key, &chat.address, &item)?;
            row.traceparent.clone_from(&traceparent);
            rows.push(row);
        }
    }
    core.store
        .channels()
        .advance_channel_chat(core.name(), &chat.chat_key, last, &rows)
        .await?;
    core.set_cursor(&chat.conversation_id, last);
    if !rows.is_empty() {
        core.wake.notify_one();
    }
    Ok(())
}

async fn flush_progress(core: &SharedCore, progress: &mut Progress) {
    let caps = core.channel.capabilities();
    let due = progress.due(Instant::now(), now_ms(), core.tuning.progress_interval);
    for (chat_key, turn, text) in due {
        let Some(chat) = core
            .all_chats()
            .into_iter()
            .find(|c| c.chat_key == chat_key)
        else {
            continue;
        };
        let Some(item) = status_edit(&turn, text, &caps) else {
            continue;
        };
        let written = match core.row(&chat.chat_key, &chat.address, &item) {
            Ok(row) => core
                .store
                .channels()
                .enqueue_outbox(&[row])
                .await
                .map_err(ChannelError::from),
            Err(e) => Err(e),
        };
        match written {
            Ok(_) => core.wake.notify_one(),
            Err(e) => tracing::warn!(channel = core.name(), "progress not queued: {e}"),
        }
    }
}

/// The trace of each turn this node's pump saw start (issue 31), from its `turn_started`
/// event: the rows rendered for the turn's events carry it, so their delivery joins the
/// turn's trace. A turn's entry goes with its end.
#[derive(Default)]
struct Traces(std::collections::HashMap<tether_proto::TurnId, String>);

impl Traces {
    fn of(&mut self, ev: &EventEnvelope) -> Option<String> {
        let turn = ev.turn_id.as_ref()?;
        match &ev.payload {
            EventPayload::TurnStarted {
                traceparent: Some(tp),
                ..
            } => {
                self.0.insert(turn.clone(), tp.clone());
                Some(tp.clone())
            }
            EventPayload::TurnCompleted { .. }
            | EventPayload::TurnFailed { .. }
            | EventPayload::TurnCancelled { .. }
            | EventPayload::TurnInterrupted { .. } => self.0.remove(turn),
            _ => self.0.get(turn).cloned(),
        }
    }
}
