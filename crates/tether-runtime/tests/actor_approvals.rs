//! Approvals and questions in-process: their deadlines come from the runtime's clock,
//! which the test moves (a scripted agent, a temporary store, no daemon).

mod support;

use std::time::Duration;

use support::{
    Agent, ManualClock, ask_permission, config, conversation, count, events_until, kinds, msg,
    runtime, temp, turns_ended,
};
use tether_agents::{AgentEvent, PermissionReply};
use tether_proto::{ApprovalStatus, Decision, EventPayload, MessageRole};
use tether_testkit::within;
use tokio::sync::oneshot;

fn now() -> i64 {
    tether_store::now_ms()
}

#[tokio::test]
async fn an_unanswered_approval_expires_when_the_clock_reaches_its_deadline() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let t0 = now();
    let clock = ManualClock::new(t0);
    let rt = runtime(&dir, config(&dir), &agent, clock.clone()).await;
    let conv = conversation(&rt).await;

    within("send", rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-1");
    let p = agent.prompt().await;
    let mut answer = ask_permission(&p, "run tests");
    let evs = events_until(&rt, &conv, "approval requested", |evs| {
        count(evs, "approval_requested") == 1
    })
    .await;
    let Some(EventPayload::ApprovalRequested {
        approval_id,
        deadline_ms,
        ..
    }) = evs.last().map(|e| e.payload.clone())
    else {
        panic!("no approval: {:?}", kinds(&evs));
    };
    // The deadline comes from the runtime's clock, not the system's.
    assert_eq!(deadline_ms, t0 + 60_000);

    clock.advance(59_999);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let pending = within(
        "list",
        rt.list_approvals(Some(ApprovalStatus::Pending), None, 100),
    )
    .await
    .unwrap();
    assert_eq!(pending.items.len(), 1, "expired before its deadline");
    assert!(answer.try_recv().is_err(), "the agent was answered early");

    clock.advance(1);
    let reply = within("the agent is told", answer).await.unwrap();
    assert_eq!(reply, PermissionReply::Decision(Decision::Deny));
    let evs = events_until(&rt, &conv, "approval expired", |evs| {
        count(evs, "approval_resolved") == 1
    })
    .await;
    assert!(evs.iter().any(|e| matches!(
        &e.payload,
        EventPayload::ApprovalResolved { approval_id: id, status: ApprovalStatus::Expired, .. }
            if *id == approval_id
    )));
    let history = within("history", rt.history(&conv, None, 100))
        .await
        .unwrap();
    let note = history
        .iter()
        .find(|m| m.role == MessageRole::Status && m.text.contains("expired at"))
        .expect("an expiry notice");
    assert!(
        note.text.ends_with("without an answer: denied"),
        "{}",
        note.text
    );

    p.complete("done");
    let evs = turns_ended(&rt, &conv, 1).await;
    assert_eq!(kinds(&evs).last(), Some(&"turn_completed"));
}

#[tokio::test]
async fn an_answer_before_the_deadline_wins_and_an_unanswered_question_expires() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let clock = ManualClock::new(now());
    let rt = runtime(&dir, config(&dir), &agent, clock.clone()).await;
    let conv = conversation(&rt).await;

    within("send", rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-1");
    let p = agent.prompt().await;
    let answer = ask_permission(&p, "write");
    let (qtx, qrx) = oneshot::channel();
    p.say(AgentEvent::Question(tether_agents::QuestionRequest {
        prompt: "which branch?".to_string(),
        reply: qtx,
    }));
    let evs = events_until(&rt, &conv, "both asked", |evs| {
        count(evs, "approval_requested") == 1 && count(evs, "question_asked") == 1
    })
    .await;
    let approval_id = evs
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::ApprovalRequested { approval_id, .. } => Some(approval_id.clone()),
            _ => None,
        })
        .unwrap();
    within(
        "answer",
        rt.answer_approval(&approval_id, Decision::Allow, "test"),
    )
    .await
    .unwrap();
    assert_eq!(
        within("the agent is told", answer).await.unwrap(),
        PermissionReply::Decision(Decision::Allow)
    );

    // The deadline passes: the question expires, the answered approval stays answered.
    clock.advance(60_000);
    assert_eq!(within("the question ends", qrx).await.unwrap(), None);
    let evs = events_until(&rt, &conv, "question expired", |evs| {
        count(evs, "question_resolved") == 1
    })
    .await;
    assert!(evs.iter().any(|e| matches!(
        &e.payload,
        EventPayload::QuestionResolved {
            status: tether_proto::QuestionStatus::Expired,
            ..
        }
    )));
    let resolved: Vec<_> = evs
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ApprovalResolved { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(resolved, [ApprovalStatus::Allowed]);
    let approval = within("approvals", rt.list_approvals(None, None, 100))
        .await
        .unwrap();
    assert_eq!(approval.items[0].status, ApprovalStatus::Allowed);
    let history = within("history", rt.history(&conv, None, 100))
        .await
        .unwrap();
    let notices: Vec<_> = history
        .iter()
        .filter(|m| m.text.contains("expired at"))
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].starts_with("question "), "{}", notices[0]);
    p.complete("done");
    turns_ended(&rt, &conv, 1).await;
}
