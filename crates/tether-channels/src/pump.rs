//! The event pump: turns each mapped conversation's events into outbox rows. Every chat
//! keeps a cursor (the last event id handled); rows and the cursor are written in one
//! transaction, so after a crash or restart the pump resumes exactly where it stopped —
//! including the restart notices written by recovery before the channels started.
//!
//! Live events only say *which* conversation moved; the events themselves are always
//! read from the store after the cursor, so nothing is missed or handled twice.

use std::collections::BTreeSet;
use std::time::Instant;

use tether_proto::{EventEnvelope, EventPayload};
use tether_store::{ChannelChat, now_ms};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::ChannelError;
use crate::core::SharedCore;
use crate::progress::Progress;
use crate::render::{render, status_edit};

const PAGE: u32 = 200;

/// Runs until the runtime's event bus closes or the task is aborted. `rx` must have been
/// subscribed before the catch-up, so no event falls between the two.
pub(crate) async fn run(core: SharedCore, mut rx: broadcast::Receiver<EventEnvelope>) {
    let mut progress = Progress::default();
    catch_up_all(&core, &mut progress).await;
    let mut tick = tokio::time::interval(core.tuning.progress_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            got = rx.recv() => {
                let mut convs = BTreeSet::new();
                let mut lagged = false;
                match got {
                    Ok(ev) => { convs.insert(ev.conversation_id); }
                    Err(RecvError::Lagged(_)) => lagged = true,
                    Err(RecvError::Closed) => break,
                }
                // Coalesce whatever else is already waiting.
                loop {
                    match rx.try_recv() {
                        Ok(ev) => { convs.insert(ev.conversation_id); }
                        Err(broadcast::error::TryRecvError::Lagged(_)) => lagged = true,
                        Err(_) => break,
                    }
                }
                if lagged {
                    catch_up_all(&core, &mut progress).await;
                } else {
                    for conv in convs {
                        if let Some(chat) = core.chat_of(&conv) {
                            handle(&core, &mut progress, &chat).await;
                        }
                    }
                }
            }
            _ = tick.tick() => flush_progress(&core, &mut progress).await,
        }
    }
}

async fn catch_up_all(core: &SharedCore, progress: &mut Progress) {
    for chat in core.all_chats() {
        handle(core, progress, &chat).await;
    }
}

async fn handle(core: &SharedCore, progress: &mut Progress, chat: &ChannelChat) {
    if let Err(e) = catch_up(core, progress, chat).await {
        tracing::warn!(
            channel = core.name(),
            conversation = chat.conversation_id,
            "cannot turn events into messages: {e}"
        );
    }
}

/// Handles the chat's events after its cursor, a page at a time.
pub(crate) async fn catch_up(
    core: &SharedCore,
    progress: &mut Progress,
    chat: &ChannelChat,
) -> Result<(), ChannelError> {
    let caps = core.channel.capabilities();
    let mut cursor = core
        .chat_of(&chat.conversation_id)
        .map_or(chat.event_cursor, |c| c.event_cursor);
    loop {
        let events = core
            .runtime
            .conversation_events(&chat.conversation_id, cursor, PAGE)
            .await?;
        let Some(last) = events.last().map(|e| e.id) else {
            return Ok(());
        };
        let mut rows = Vec::new();
        for ev in &events {
            progress.observe(&chat.chat_key, ev);
            let approval = match &ev.payload {
                EventPayload::ApprovalResolved { approval_id, .. } => {
                    core.store.get_approval(approval_id).await?
                }
                _ => None,
            };
            for item in render(ev, approval.as_ref(), &caps, core.units) {
                rows.push(core.row(&chat.chat_key, &chat.address, &item)?);
            }
        }
        core.store
            .advance_channel_chat(core.name(), &chat.chat_key, last, &rows)
            .await?;
        core.set_cursor(&chat.conversation_id, last);
        cursor = last;
        if !rows.is_empty() {
            core.wake.notify_one();
        }
        if events.len() < PAGE as usize {
            return Ok(());
        }
    }
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
