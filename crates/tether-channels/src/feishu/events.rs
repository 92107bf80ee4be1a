//! What an authenticated Feishu event does, whichever way it arrived (the webhook or the
//! long connection): Feishu's side of the durable intake (`crate::intake`). Recorded by
//! `event_id` with its payload before Feishu is answered (a repeat is dropped), then
//! `im.message.receive_v1` goes to its chat's lane (so the answer never waits for agent
//! work) and `card.action.trigger` is resolved at once so its toast can answer the press
//! (bounded well under Feishu's 3 s); marked handled once the runtime has it, and
//! replayed at the next start when a crash left it unhandled.

use std::time::Duration;

use serde_json::{Value, json};

use super::wire::{ButtonValue, CardEvent, Content, Envelope, MessageEvent};
use crate::ChannelError;
use crate::core::SharedCore;
use crate::inbound::{InChat, InKind, Inbound, Sender};
use crate::intake::{Intake, Platform};
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

/// Feishu's intake.
pub(crate) type EventsIntake = Intake<Events>;

/// An event as it came: its envelope, the payload that is recorded, and the key that
/// names it when it has no `event_id` of its own (a legacy card callback's message id).
pub(crate) struct Incoming {
    envelope: Envelope,
    raw: String,
    fallback_key: Option<String>,
}

/// Feishu's side of the intake.
pub(crate) struct Events {
    pub core: SharedCore,
}

#[async_trait::async_trait]
impl Platform for Events {
    type Delivery = Incoming;
    type Work = Inbound;
    type Done = Result<Option<String>, ChannelError>;
    type Answer = Answer;

    const NOUN: &'static str = "event";
    const AFTER_REPLAY: bool = false;

    /// Schema 1.0 events have no `event_id` (and tether does not use them): nothing.
    fn key(&self, d: &Incoming) -> Option<String> {
        d.envelope
            .header
            .event_id
            .clone()
            .or_else(|| d.fallback_key.clone())
    }

    fn payload(&self, d: &Incoming) -> String {
        d.raw.clone()
    }

    fn read(&self, payload: &str) -> Result<Incoming, String> {
        let envelope = serde_json::from_str::<Envelope>(payload).map_err(|e| e.to_string())?;
        Ok(Incoming {
            envelope,
            raw: payload.to_owned(),
            fallback_key: None,
        })
    }

    /// A message to its chat's lane, a button press at once (its toast is the answer).
    async fn route(&self, intake: &EventsIntake, key: String, d: Incoming, _: bool) -> Answer {
        let event = d.envelope;
        match event.header.event_type.as_deref().unwrap_or_default() {
            "im.message.receive_v1" => match parse(&event.event).and_then(|m| message(&key, &m)) {
                Some(msg) => {
                    let lane = msg.chat_key(self.core.group_mode);
                    intake.lane(lane, key, msg);
                }
                None => intake.handled(&key).await,
            },
            "card.action.trigger" => {
                let Some(msg) = parse(&event.event).and_then(|c| action(&key, &c)) else {
                    intake.handled(&key).await;
                    return Answer::toast("warning", "This button is not known.");
                };
                let job = intake.now(key, msg);
                return match tokio::time::timeout(ACTION_WAIT, job).await {
                    Ok(Ok(Ok(Some(text)))) => Answer::toast("info", &text),
                    Ok(Ok(Err(e))) => Answer::toast("error", &e.to_string()),
                    _ => Answer::toast("info", "Received."),
                };
            }
            _ => intake.handled(&key).await,
        }
        Answer::Ack
    }

    async fn handle(&self, msg: Inbound) -> Self::Done {
        let key = msg.key.clone();
        let handled = crate::route::handle(&self.core, msg).await;
        if let Err(e) = &handled {
            tracing::warn!(channel = "feishu", event = key, "event failed: {e}");
        }
        // The runtime has it (or refused it for good): not replayed.
        handled
    }
}

/// Handles one event (schema 2.0, already decrypted and authenticated): recorded (the
/// dedupe key and the event, in one transaction) before Feishu is answered, then routed.
/// `fallback_key` names it when it has no `event_id` of its own.
pub(crate) async fn dispatch(
    intake: &EventsIntake,
    event: &Value,
    fallback_key: Option<&str>,
) -> Answer {
    let incoming = Incoming {
        envelope: parse::<Envelope>(event).unwrap_or_default(),
        raw: event.to_string(),
        fallback_key: fallback_key.map(str::to_owned),
    };
    match intake.accept(incoming).await {
        Ok(Some(answer)) => answer,
        // A repeat, or nothing tether uses.
        Ok(None) => Answer::Ack,
        Err(_) => Answer::Retry,
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
    let decision = crate::buttons::decision_from(value.decision.as_deref()?)?;
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

#[cfg(test)]
mod tests {
    use tether_proto::Decision;

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
