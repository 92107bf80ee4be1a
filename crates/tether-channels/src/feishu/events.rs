//! What an authenticated Feishu event does, whichever way it arrived (the webhook or the
//! long connection): deduplicated by `event_id`, `im.message.receive_v1` queued for the
//! worker (one lane per chat, so the answer never waits for agent work), and
//! `card.action.trigger` resolved at once so its toast can answer the press (bounded well
//! under Feishu's 3 s).

use std::time::Duration;

use serde_json::{Value, json};
use tether_proto::Decision;
use tokio::sync::mpsc;

use super::wire::{ButtonValue, CardEvent, Content, Envelope, MessageEvent};
use crate::core::SharedCore;
use crate::inbound::{self, InChat, InKind, Inbound, Sender};
use crate::json::parse;

/// How long a button press may wait for its approval to resolve before the toast.
const ACTION_WAIT: Duration = Duration::from_millis(2500);

/// What to answer Feishu.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Handled (or a duplicate, or a kind tether does not use): an empty 200.
    Ack,
    /// A card button's answer, shown to the person who pressed it.
    Toast { kind: &'static str, text: String },
    /// Not recorded (the store failed): Feishu should deliver it again.
    Retry,
}

impl Answer {
    /// The JSON body Feishu expects for this answer.
    pub(crate) fn body(&self) -> Value {
        match self {
            Answer::Ack | Answer::Retry => json!({}),
            Answer::Toast { kind, text } => json!({ "toast": { "type": kind, "content": text } }),
        }
    }

    fn toast(kind: &'static str, text: &str) -> Answer {
        Answer::Toast {
            kind,
            text: text.to_string(),
        }
    }
}

/// Handles one event (schema 2.0, already decrypted and authenticated). `key` names it
/// for the dedupe table when it has no `event_id` of its own.
pub(crate) async fn dispatch(
    core: &SharedCore,
    tx: &mpsc::UnboundedSender<Inbound>,
    event: &Value,
    fallback_key: Option<&str>,
) -> Answer {
    let envelope = parse::<Envelope>(event).unwrap_or_default();
    let Some(event_id) = envelope
        .header
        .event_id
        .clone()
        .or_else(|| fallback_key.map(str::to_owned))
    else {
        // Schema 1.0 events are not used by tether: acknowledge and ignore.
        return Answer::Ack;
    };
    // Recorded (the dedupe key and the event, in one transaction) before Feishu is
    // answered; handled after, and marked handled once the runtime has it, so an event
    // a crash caught in between is replayed at the next start (see [`replay`]).
    match core
        .store
        .accept_inbound("feishu", &event_id, &event.to_string())
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(channel = "feishu", event_id, "duplicate event ignored");
            return Answer::Ack;
        }
        Err(e) => {
            tracing::warn!(channel = "feishu", "cannot record event: {e}");
            return Answer::Retry;
        }
    }
    route(core, tx, envelope, &event_id).await
}

/// Hands a recorded event to its handler: a message to its chat's lane, a button press
/// at once (its toast is the answer).
async fn route(
    core: &SharedCore,
    tx: &mpsc::UnboundedSender<Inbound>,
    event: Envelope,
    event_id: &str,
) -> Answer {
    match event.header.event_type.as_deref().unwrap_or_default() {
        "im.message.receive_v1" => match parse(&event.event).and_then(|m| message(event_id, &m)) {
            Some(msg) => {
                let _ = tx.send(msg);
            }
            None => handled(core, event_id).await,
        },
        "card.action.trigger" => {
            let Some(msg) = parse(&event.event).and_then(|c| action(event_id, &c)) else {
                handled(core, event_id).await;
                return Answer::toast("warning", "This button is not known.");
            };
            let core = core.clone();
            let key = event_id.to_owned();
            let job = tokio::spawn(async move {
                let answer = inbound::handle(&core, msg).await;
                handled(&core, &key).await;
                answer
            });
            return match tokio::time::timeout(ACTION_WAIT, job).await {
                Ok(Ok(Ok(Some(text)))) => Answer::toast("info", &text),
                Ok(Ok(Err(e))) => Answer::toast("error", &e.to_string()),
                _ => Answer::toast("info", "Received."),
            };
        }
        _ => handled(core, event_id).await,
    }
    Answer::Ack
}

/// The event will not be replayed at start-up.
async fn handled(core: &SharedCore, event_id: &str) {
    if let Err(e) = core.store.mark_inbound_handled("feishu", event_id).await {
        tracing::warn!(
            channel = "feishu",
            event_id,
            "cannot mark an event handled: {e}"
        );
    }
}

/// Hands on again what was recorded before the last stop and never handled (the same
/// guarantee as Slack's, Telegram's and Discord's intake): a message's turn id comes
/// from its event id, so one the runtime had already is not run twice.
pub(crate) async fn replay(core: SharedCore, tx: mpsc::UnboundedSender<Inbound>) {
    let pending = match core.store.unhandled_inbound("feishu").await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(channel = "feishu", "cannot read unhandled events: {e}");
            return;
        }
    };
    for p in pending {
        match serde_json::from_str::<Envelope>(&p.payload) {
            Ok(event) => {
                tracing::info!(channel = "feishu", event_id = p.key, "replaying an event");
                route(&core, &tx, event, &p.key).await;
            }
            Err(_) => handled(&core, &p.key).await,
        }
    }
}

/// `im.message.receive_v1` → a text message (mentions removed), or files (image, file,
/// a post with images; see `media`). Other kinds and messages from bots are ignored.
fn message(event_id: &str, ev: &MessageEvent) -> Option<Inbound> {
    if ev.sender.sender_type.as_deref().unwrap_or("user") != "user" {
        return None;
    }
    let open_id = ev.sender.sender_id.open_id.as_deref()?;
    let m = &ev.message;
    let content: Value = serde_json::from_str(m.content.as_deref()?).ok()?;
    let kind = match m.message_type.as_deref()? {
        "text" => {
            let mut text = parse::<Content>(&content)?.text?;
            for mention in &m.mentions {
                if let Some(key) = mention.key.as_deref().filter(|k| !k.is_empty()) {
                    text = text.replace(key, "");
                }
            }
            // Only the mentions go: the rest keeps its lines and spacing (code, lists).
            InKind::Text(text.trim().to_string())
        }
        other => super::media::kind(other, m.message_id.as_deref()?, &content)?,
    };
    let chat_id = m.chat_id.as_deref()?;
    let is_group = m.chat_type.as_deref() != Some("p2p");
    Some(Inbound {
        key: event_id.to_string(),
        chat: InChat {
            chat_id: chat_id.to_string(),
            thread_id: None,
            is_group,
            title: if is_group {
                format!("group {chat_id}")
            } else {
                format!("chat with {open_id}")
            },
        },
        sender: Sender {
            id: open_id.to_string(),
            name: open_id.to_string(),
        },
        kind,
    })
}

/// `card.action.trigger` → a decision on the approval the button names.
fn action(event_id: &str, ev: &CardEvent) -> Option<Inbound> {
    let open_id = ev.operator.open_id.as_deref()?;
    let value = &ev.action.value;
    // Some clients deliver the value as a JSON string.
    let value: ButtonValue = match value.as_str() {
        Some(s) => serde_json::from_str(s).ok()?,
        None => parse(value)?,
    };
    let approval_id = tether_proto::ApprovalId::from(value.approval_id.as_deref()?);
    let decision = match value.decision.as_deref()? {
        "allow" => Decision::Allow,
        "allow_always" => Decision::AllowAlways,
        "deny" => Decision::Deny,
        _ => return None,
    };
    let chat_id = ev.context.open_chat_id.as_deref()?;
    Some(Inbound {
        key: event_id.to_string(),
        chat: InChat {
            chat_id: chat_id.to_string(),
            thread_id: None,
            // The chat key of a per-user group conversation needs to know it is a group;
            // card events do not say, so groups are recognised by the mapping lookup.
            is_group: false,
            title: String::new(),
        },
        sender: Sender {
            id: open_id.to_string(),
            name: open_id.to_string(),
        },
        kind: InKind::Decide {
            approval_id,
            decision,
        },
    })
}

pub(crate) async fn worker(core: SharedCore, mut rx: mpsc::UnboundedReceiver<Inbound>) {
    let (lanes_tx, lanes_rx) = mpsc::unbounded_channel();
    let handler = {
        let core = core.clone();
        move |msg: Inbound| {
            let core = core.clone();
            async move {
                let key = msg.key.clone();
                if let Err(e) = inbound::handle(&core, msg).await {
                    tracing::warn!(channel = "feishu", event = key, "event failed: {e}");
                }
                // The runtime has it (or refused it for good): not replayed.
                handled(&core, &key).await;
            }
        }
    };
    tokio::spawn(crate::lanes::run_lanes(lanes_rx, handler));
    while let Some(msg) = rx.recv().await {
        let lane = msg.chat_key(core.group_mode);
        let _ = lanes_tx.send((lane, msg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_their_mentions() {
        let ev = json!({
            "sender": {"sender_id": {"open_id": "ou_1"}, "sender_type": "user"},
            "message": {"chat_id": "oc_9", "chat_type": "group", "message_type": "text",
                        "content": "{\"text\":\"@_user_1  /status  \"}",
                        "mentions": [{"key": "@_user_1", "name": "tether"}]}
        });
        let m = parse(&ev)
            .and_then(|ev| message("e1", &ev))
            .unwrap_or_else(|| panic!("a message"));
        assert_eq!(m.kind, InKind::Text("/status".into()));
        assert!(m.chat.is_group);
        assert_eq!(m.sender.id, "ou_1");
        let bot = json!({"sender": {"sender_type": "app"}, "message": {}});
        assert!(parse(&bot).and_then(|ev| message("e2", &ev)).is_none());
    }

    #[test]
    fn card_actions_name_their_approval() {
        let ev = json!({
            "operator": {"open_id": "ou_1"},
            "action": {"value": {"approval_id": "a1", "decision": "allow_always"}, "tag": "button"},
            "context": {"open_message_id": "om_1", "open_chat_id": "oc_9"}
        });
        let m = parse(&ev)
            .and_then(|ev| action("e1", &ev))
            .unwrap_or_else(|| panic!("an action"));
        assert_eq!(
            m.kind,
            InKind::Decide {
                approval_id: "a1".into(),
                decision: Decision::AllowAlways
            }
        );
        let bad = json!({"operator": {"open_id": "ou_1"}, "action": {"value": {"approval_id": "a1", "decision": "maybe"}}, "context": {"open_chat_id": "oc"}});
        assert!(parse(&bad).and_then(|ev| action("e2", &ev)).is_none());
    }
}
