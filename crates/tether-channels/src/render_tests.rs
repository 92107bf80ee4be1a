//! Tests of what reaches the phone.

use tether_proto::{ApprovalStatus, Decision, ErrorCode, EventEnvelope, EventPayload};

use super::*;
use crate::format::chars;

const CAPS: Capabilities = Capabilities {
    buttons: true,
    edit: true,
    cards: false,
    max_text_len: 100,
};

fn ev(id: i64, payload: EventPayload) -> EventEnvelope {
    EventEnvelope {
        id,
        session_id: "s".into(),
        conversation_id: "c".into(),
        seq: id,
        turn_id: Some("t1".into()),
        at_ms: 0,
        payload,
    }
}

#[test]
fn a_turn_sends_one_status_message_then_edits_it_and_sends_the_result() {
    let started = render(
        &ev(
            1,
            EventPayload::TurnStarted {
                input: "x".into(),
                traceparent: None,
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].key, "turn:t1:status");
    assert!(started[0].edit_of.is_none());

    let delta = render(
        &ev(2, EventPayload::MessageDelta { text: "hi".into() }),
        None,
        &CAPS,
        chars,
    );
    assert!(delta.is_empty(), "deltas only feed the progress summary");

    let long = "word ".repeat(50);
    let done = render(
        &ev(
            3,
            EventPayload::TurnCompleted {
                stop_reason: None,
                text: long.clone(),
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(done[0].key, "turn:t1:progress");
    assert_eq!(done[0].edit_of.as_deref(), Some("turn:t1:status"));
    assert!(done[0].replace);
    let parts: Vec<_> = done[1..].iter().map(|i| i.msg.text.clone()).collect();
    assert!(parts.len() >= 3, "{parts:?}");
    assert!(parts.iter().all(|p| p.chars().count() <= 100));
    assert_eq!(parts.join(" "), long.trim());
    assert_eq!(done[1].key, "turn:t1:result:0");
    assert_eq!(done[1].msg.kind, crate::channel::TextKind::Markdown);
}

#[test]
fn approvals_carry_buttons_naming_the_approval_and_resolutions_edit_them() {
    let asked = render(
        &ev(
            1,
            EventPayload::ApprovalRequested {
                approval_id: "a1".into(),
                title: "rm -rf build".into(),
                kind: Some("execute".into()),
                detail: None,
                options: vec![Decision::Allow, Decision::AllowAlways, Decision::Deny],
                deadline_ms: 0,
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].key, "approval:a1");
    let labels: Vec<_> = asked[0]
        .msg
        .actions
        .iter()
        .map(|a| a.label.as_str())
        .collect();
    assert_eq!(labels, ["Allow", "Always", "Deny"]);
    assert!(asked[0].msg.actions.iter().all(|a| a.approval_id == "a1"));
    assert!(asked[0].msg.text.contains("rm -rf build"));

    let resolved = render(
        &ev(
            2,
            EventPayload::ApprovalResolved {
                approval_id: "a1".into(),
                status: ApprovalStatus::Denied,
                decided_by: Some("telegram:@ann".into()),
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(resolved[0].edit_of.as_deref(), Some("approval:a1"));
    assert!(resolved[0].msg.actions.is_empty(), "the buttons go away");
    assert!(
        resolved[0].msg.text.contains("denied by telegram:@ann"),
        "{}",
        resolved[0].msg.text
    );

    // Without buttons the message says how to answer; without edits only decisions are sent.
    let plain = Capabilities {
        buttons: false,
        edit: false,
        ..CAPS
    };
    let asked = render(
        &ev(
            1,
            EventPayload::ApprovalRequested {
                approval_id: "a2".into(),
                title: "deploy".into(),
                kind: None,
                detail: None,
                options: vec![Decision::Allow, Decision::Deny],
                deadline_ms: 0,
            },
        ),
        None,
        &plain,
        chars,
    );
    assert!(asked[0].msg.text.contains("/approve a2"));
    let expired = EventPayload::ApprovalResolved {
        approval_id: "a2".into(),
        status: ApprovalStatus::Expired,
        decided_by: None,
    };
    assert!(render(&ev(2, expired), None, &plain, chars).is_empty());
}

#[test]
fn failures_cancellations_and_notices_are_sent_with_their_reason() {
    let failed = render(
        &ev(
            1,
            EventPayload::TurnFailed {
                code: ErrorCode::AgentCrashed,
                message: "exit 3".into(),
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(failed.len(), 2);
    assert!(failed[1].msg.text.contains("agent_crashed") && failed[1].msg.text.contains("exit 3"));
    let cancelled = render(&ev(2, EventPayload::TurnCancelled {}), None, &CAPS, chars);
    assert!(cancelled[1].msg.text.contains("cancelled"));
    let interrupted = render(
        &ev(
            3,
            EventPayload::TurnInterrupted {
                reason: "tether restarted".into(),
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(interrupted.len(), 1, "only the status message changes");
    let notice = render(
        &ev(
            9,
            EventPayload::Status {
                text: "tether restarted".into(),
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(notice[0].key, "event:9");
    let q = render(
        &ev(
            4,
            EventPayload::QuestionAsked {
                question_id: "q1".into(),
                prompt: "which branch?".into(),
                deadline_ms: 0,
            },
        ),
        None,
        &CAPS,
        chars,
    );
    assert_eq!(q[0].key, "question:q1");
}
