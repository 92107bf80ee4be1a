//! What reaches the phone, decided per event (pure): the turn's status message (sent once,
//! then edited in place), approvals with buttons and their resolution, questions, the
//! final result split at the channel's limit, failures with their reason, and status
//! notices (new session, restart). Deltas and tool calls only feed the progress summary.
//!
//! Every item carries a dedupe key derived from ids in the event, so rendering the same
//! event twice can never send twice.

use tether_core::short_id;
use tether_proto::{Approval, ApprovalStatus, Decision, EventEnvelope, EventPayload};

use crate::channel::{Action, Capabilities, OutMessage};
use crate::format::{Units, split_text};

/// One outbox entry to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: String,
    /// `Some(target key)`: an edit of that sent message.
    pub edit_of: Option<String>,
    pub msg: OutMessage,
    /// Replace the body of an existing row with this key (coalesced edits).
    pub replace: bool,
}

impl Item {
    fn send(key: String, msg: OutMessage) -> Item {
        Item {
            key,
            edit_of: None,
            msg,
            replace: false,
        }
    }
}

/// The key of a turn's status message and of its (coalesced) edit.
pub fn status_key(turn_id: &str) -> String {
    format!("turn:{turn_id}:status")
}

fn progress_key(turn_id: &str) -> String {
    format!("turn:{turn_id}:progress")
}

fn approval_key(approval_id: &str) -> String {
    format!("approval:{approval_id}")
}

/// The turn's status message. A card where the channel has cards: cards can be updated
/// far more often than text messages (Feishu allows few edits of a text message).
fn status_message(text: String, caps: &Capabilities) -> OutMessage {
    let mut msg = OutMessage::plain(text);
    msg.card = caps.cards;
    msg
}

/// An edit of the turn's status message (the progress summary or the final state).
pub fn status_edit(turn_id: &str, text: String, caps: &Capabilities) -> Option<Item> {
    caps.edit.then(|| Item {
        key: progress_key(turn_id),
        edit_of: Some(status_key(turn_id)),
        msg: status_message(text, caps),
        replace: true,
    })
}

/// The button label of a decision.
pub fn decision_label(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "Allow",
        Decision::AllowAlways => "Always",
        Decision::Deny => "Deny",
    }
}

fn resolution_line(status: ApprovalStatus, by: Option<&str>) -> String {
    let by = by.map(|b| format!(" by {b}")).unwrap_or_default();
    match status {
        ApprovalStatus::Pending => "⏳ pending".to_string(),
        ApprovalStatus::Allowed => format!("✅ allowed{by}"),
        ApprovalStatus::AllowedAlways => format!("✅ always allowed{by}"),
        ApprovalStatus::Denied => format!("⛔ denied{by}"),
        ApprovalStatus::Expired => "⌛ expired (no longer pending)".to_string(),
        ApprovalStatus::Cancelled => "✖ cancelled (no longer pending)".to_string(),
    }
}

fn approval_text(title: &str, kind: Option<&str>, approval_id: &str) -> String {
    let kind = kind.map(|k| format!(" ({k})")).unwrap_or_default();
    format!(
        "🔐 The agent asks for permission{kind}:\n{title}\n\napproval {}",
        short_id(approval_id)
    )
}

/// Renders one event. `approval` is the stored approval of an `approval_resolved` event
/// (for its title); `units` counts text the way the channel does.
pub fn render(
    ev: &EventEnvelope,
    approval: Option<&Approval>,
    caps: &Capabilities,
    units: Units,
) -> Vec<Item> {
    let turn = ev.turn_id.as_deref().unwrap_or("-");
    match &ev.payload {
        EventPayload::TurnStarted { .. } => vec![Item::send(
            status_key(turn),
            status_message("⏳ Working on it…".to_string(), caps),
        )],
        EventPayload::ApprovalRequested {
            approval_id,
            title,
            kind,
            options,
            ..
        } => {
            let text = approval_text(title, kind.as_deref(), approval_id);
            let mut msg = OutMessage::plain(if caps.buttons {
                text
            } else {
                format!(
                    "{text}\nanswer with /approve {0} or /deny {0}",
                    short_id(approval_id)
                )
            });
            msg.title = Some("Approval needed".to_string());
            msg.card = caps.cards;
            if caps.buttons {
                msg.actions = options
                    .iter()
                    .map(|d| Action {
                        label: decision_label(*d).to_string(),
                        approval_id: approval_id.clone(),
                        decision: *d,
                    })
                    .collect();
            }
            vec![Item::send(approval_key(approval_id), msg)]
        }
        EventPayload::ApprovalResolved {
            approval_id,
            status,
            decided_by,
        } => {
            let line = resolution_line(*status, decided_by.as_deref());
            let title = approval.map_or("", |a| a.title.as_str());
            let kind = approval.and_then(|a| a.kind.as_deref());
            let mut msg = OutMessage::plain(format!(
                "{}\n\n{line}",
                approval_text(title, kind, approval_id)
            ));
            msg.title = Some("Approval".to_string());
            msg.card = caps.cards;
            let key = format!("approval:{approval_id}:resolved");
            if caps.edit {
                vec![Item {
                    key,
                    edit_of: Some(approval_key(approval_id)),
                    msg,
                    replace: true,
                }]
            } else if matches!(
                status,
                ApprovalStatus::Allowed | ApprovalStatus::AllowedAlways | ApprovalStatus::Denied
            ) {
                vec![Item::send(
                    key,
                    OutMessage::plain(format!("{title}: {line}")),
                )]
            } else {
                Vec::new()
            }
        }
        EventPayload::QuestionAsked {
            question_id,
            prompt,
            ..
        } => vec![Item::send(
            format!("question:{question_id}"),
            OutMessage::plain(format!("❓ {prompt}\n\n(reply with a message to answer)")),
        )],
        EventPayload::TurnCompleted { text, .. } => {
            let mut out: Vec<Item> = status_edit(turn, "✅ Done".to_string(), caps)
                .into_iter()
                .collect();
            let text = if text.trim().is_empty() {
                "(the agent finished without a reply)"
            } else {
                text.as_str()
            };
            for (i, part) in split_text(text, caps.max_text_len, units)
                .into_iter()
                .enumerate()
            {
                out.push(Item::send(
                    format!("turn:{turn}:result:{i}"),
                    OutMessage::markdown(part),
                ));
            }
            out
        }
        EventPayload::TurnFailed { code, message } => {
            let mut out: Vec<Item> = status_edit(turn, format!("❌ Failed ({code})"), caps)
                .into_iter()
                .collect();
            let text = format!("❌ The turn failed ({code}): {message}");
            out.push(Item::send(
                format!("turn:{turn}:failed"),
                OutMessage::plain(truncate(&text, caps.max_text_len, units)),
            ));
            out
        }
        EventPayload::TurnCancelled {} => {
            let mut out: Vec<Item> = status_edit(turn, "⏹ Cancelled".to_string(), caps)
                .into_iter()
                .collect();
            out.push(Item::send(
                format!("turn:{turn}:cancelled"),
                OutMessage::plain("⏹ The turn was cancelled."),
            ));
            out
        }
        // The restart notice (a `status` event) tells the person; only the status
        // message changes here.
        EventPayload::TurnInterrupted { reason } => {
            status_edit(turn, format!("⚠️ Interrupted: {reason}"), caps)
                .into_iter()
                .collect()
        }
        EventPayload::Status { text } => vec![Item::send(
            format!("event:{}", ev.id),
            OutMessage::plain(truncate(&format!("ℹ️ {text}"), caps.max_text_len, units)),
        )],
        EventPayload::SessionStarted { .. }
        | EventPayload::SessionLive { .. }
        | EventPayload::SessionDormant { .. }
        | EventPayload::MessageDelta { .. }
        | EventPayload::ThoughtDelta { .. }
        | EventPayload::ToolCall { .. }
        | EventPayload::ToolCallUpdate { .. }
        | EventPayload::QuestionResolved { .. }
        | EventPayload::DelegationStarted { .. }
        | EventPayload::DelegationCompleted { .. }
        | EventPayload::DelegationSessionUpdate { .. } => Vec::new(),
    }
}

/// The first part of `text` that fits `limit` (notices are never split).
fn truncate(text: &str, limit: usize, units: Units) -> String {
    split_text(text, limit, units)
        .into_iter()
        .next()
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
