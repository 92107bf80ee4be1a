//! The session actor in-process (ordering, queueing, stop racing start and prompt): a
//! runtime on a temporary store driving a scripted agent, with a clock the test sets.
//! Events are read back from the store.

mod support;

use support::{
    AGENT, Agent, ManualClock, ask_permission, config, conversation, count, deltas, events_until,
    kinds, msg, runtime, temp, turns_ended,
};
use tether_agents::{AgentError, AgentEvent, PermissionReply};
use tether_proto::{Decision, ErrorCode, EventPayload, MessageOutcomeKind, MessageRole};
use tether_testkit::within;

fn now() -> i64 {
    tether_store::now_ms()
}

#[tokio::test]
async fn a_turn_stores_its_events_in_the_order_the_agent_sent_them() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let rt = runtime(&dir, config(&dir), &agent, ManualClock::new(now())).await;
    let conv = conversation(&rt).await;

    let out = within("send", rt.send_message(&conv, msg("hello"), "test"))
        .await
        .unwrap();
    assert_eq!(out.outcome, MessageOutcomeKind::Started);
    let start = agent.start().await;
    assert_eq!(start.req.resume, None);
    assert_eq!(start.req.spec.name, AGENT);
    start.ok("ext-1");
    let p = agent.prompt().await;
    assert_eq!(p.text, "hello");
    // Enough deltas to fill several coalesced batches, with other events in between.
    let mut said = String::new();
    for i in 0..150 {
        let d = format!("{i},");
        p.delta(&d);
        said.push_str(&d);
    }
    // A permission request is stored after everything sent before it.
    let answer = ask_permission(&p, "read a file");
    let evs = events_until(&rt, &conv, "approval requested", |evs| {
        count(evs, "approval_requested") == 1
    })
    .await;
    let Some(EventPayload::ApprovalRequested { approval_id, .. }) =
        evs.last().map(|e| e.payload.clone())
    else {
        panic!("the approval is not the last event: {:?}", kinds(&evs));
    };
    within(
        "answer",
        rt.answer_approval(&approval_id, Decision::Allow, "test"),
    )
    .await
    .unwrap();
    let reply = within("the agent is told", answer).await.unwrap();
    assert_eq!(reply, PermissionReply::Decision(Decision::Allow));
    p.say(AgentEvent::ToolCall {
        id: "t1".to_string(),
        title: "read".to_string(),
        kind: None,
        status: Some("pending".to_string()),
        detail: None,
    });
    p.say(AgentEvent::ThoughtDelta("hm".to_string()));
    p.say(AgentEvent::ToolCallUpdate {
        id: "t1".to_string(),
        title: None,
        status: Some("completed".to_string()),
        detail: None,
    });
    p.delta("end");
    said.push_str("end");
    // The turn's text is what was streamed when the agent reports none.
    p.complete("");

    let evs = turns_ended(&rt, &conv, 1).await;
    let k = kinds(&evs);
    let mut expected = vec!["session_started", "turn_started", "session_live"];
    expected.extend(std::iter::repeat_n("message_delta", 150));
    expected.extend([
        "approval_requested",
        "approval_resolved",
        "tool_call",
        "thought_delta",
        "tool_call_update",
        "message_delta",
        "turn_completed",
    ]);
    assert_eq!(k, expected);
    assert_eq!(deltas(&evs), said);
    match &evs.last().unwrap().payload {
        EventPayload::TurnCompleted { text, stop_reason } => {
            assert_eq!(text, &said);
            assert_eq!(stop_reason.as_deref(), Some("end_turn"));
        }
        other => panic!("not a completion: {other:?}"),
    }
    // One session: `seq` counts up by one, ids grow.
    for (i, w) in evs.windows(2).enumerate() {
        assert_eq!(w[1].seq, w[0].seq + 1, "seq at {i}");
        assert!(w[1].id > w[0].id, "id at {i}");
    }
    let history = within("history", rt.history(&conv, None, 100))
        .await
        .unwrap();
    let lines: Vec<_> = history.iter().map(|m| (m.role, m.text.as_str())).collect();
    assert_eq!(
        lines,
        [
            (MessageRole::User, "hello"),
            (MessageRole::Agent, said.as_str())
        ]
    );
}

#[tokio::test]
async fn messages_during_a_turn_queue_and_run_in_order() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let mut cfg = config(&dir);
    cfg.queue_cap = 2;
    let rt = runtime(&dir, cfg, &agent, ManualClock::new(now())).await;
    let conv = conversation(&rt).await;

    let send = |text: &'static str| {
        let rt = rt.clone();
        let conv = conv.clone();
        async move { within(text, rt.send_message(&conv, msg(text), "test")).await }
    };
    let one = send("one").await.unwrap();
    assert_eq!(one.outcome, MessageOutcomeKind::Started);
    agent.start().await.ok("ext-1");
    let p1 = agent.prompt().await;
    assert_eq!(p1.text, "one");
    let two = send("two").await.unwrap();
    let three = send("three").await.unwrap();
    assert_eq!(
        (two.outcome, two.queue_position),
        (MessageOutcomeKind::Queued, Some(1))
    );
    assert_eq!(
        (three.outcome, three.queue_position),
        (MessageOutcomeKind::Queued, Some(2))
    );
    let full = send("four").await.unwrap_err();
    assert_eq!(full.code(), ErrorCode::QueueFull);
    // Nothing queued runs while the turn does.
    assert!(agent.prompt_now().is_none());

    p1.complete("1");
    let p2 = agent.prompt().await;
    assert_eq!(p2.text, "two");
    // `/stop` ends the running turn only: the queued one keeps its place.
    within("stop", rt.stop(&conv)).await.unwrap();
    let p3 = agent.prompt().await;
    assert_eq!(p3.text, "three");
    drop(p2);
    p3.complete("3");

    let evs = turns_ended(&rt, &conv, 4).await;
    let named = [("one", &one), ("two", &two), ("three", &three)];
    let flow: Vec<(&str, &str)> = evs
        .iter()
        .filter(|e| e.payload.kind() == "turn_started" || e.payload.is_turn_terminal())
        .map(|e| {
            let which = named
                .iter()
                .find(|(_, o)| o.turn_id.as_deref() == e.turn_id.as_deref())
                .map_or("four", |(n, _)| *n);
            (which, e.payload.kind())
        })
        .collect();
    assert_eq!(
        flow,
        [
            ("one", "turn_started"),
            ("four", "turn_failed"),
            ("one", "turn_completed"),
            ("two", "turn_started"),
            ("two", "turn_cancelled"),
            ("three", "turn_started"),
            ("three", "turn_completed"),
        ]
    );
}

#[tokio::test]
async fn a_stop_while_the_agent_starts_abandons_the_start() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let rt = runtime(&dir, config(&dir), &agent, ManualClock::new(now())).await;
    let conv = conversation(&rt).await;

    within("send", rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    let mut slow = agent.start().await;
    let out = within("stop", rt.stop(&conv)).await.unwrap();
    assert_eq!(out.outcome, MessageOutcomeKind::Command);
    within("the start is abandoned", slow.abandoned()).await;
    let evs = turns_ended(&rt, &conv, 1).await;
    assert_eq!(
        kinds(&evs),
        ["session_started", "turn_started", "turn_cancelled"]
    );
    // A second stop finds nothing running.
    let again = within("stop again", rt.stop(&conv)).await.unwrap_err();
    assert_eq!(again.code(), ErrorCode::NothingRunning);

    // The next message starts the agent afresh; a start that fails fails its turn only.
    within("send", rt.send_message(&conv, msg("two"), "test"))
        .await
        .unwrap();
    let failing = agent.start().await;
    assert_eq!(failing.req.resume, None);
    failing.fail(AgentError::Spawn {
        message: "no such agent".to_string(),
        stderr_tail: String::new(),
    });
    let evs = turns_ended(&rt, &conv, 2).await;
    match &evs.last().unwrap().payload {
        EventPayload::TurnFailed { code, .. } => assert_eq!(*code, ErrorCode::SpawnFailed),
        other => panic!("not a failure: {other:?}"),
    }
    within("send", rt.send_message(&conv, msg("three"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-3");
    let p = agent.prompt().await;
    assert_eq!(p.text, "three");
    p.complete("done");
    let evs = turns_ended(&rt, &conv, 3).await;
    assert_eq!(count(&evs, "turn_cancelled"), 1);
    assert_eq!(count(&evs, "session_live"), 1);
    assert_eq!(agent.log.count("prompt"), 1, "{:?}", agent.log.lines());
}

#[tokio::test]
async fn a_cancel_the_agent_loses_while_its_prompt_starts_is_repeated() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let rt = runtime(&dir, config(&dir), &agent, ManualClock::new(now())).await;
    let conv = conversation(&rt).await;

    within("send", rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-1");
    // Kept until the turn ends: dropping it would crash the prompt.
    let _p = agent.prompt().await;
    agent.lose_next_cancels(1);
    within("stop", rt.stop(&conv)).await.unwrap();
    let evs = turns_ended(&rt, &conv, 1).await;
    assert_eq!(kinds(&evs).last(), Some(&"turn_cancelled"));
    let cancels: Vec<_> = agent
        .log
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("cancel"))
        .collect();
    assert_eq!(cancels[..2], ["cancel ext-1 (lost)", "cancel ext-1"]);
    // The process survived the cancel: the next turn runs in it.
    within("send", rt.send_message(&conv, msg("two"), "test"))
        .await
        .unwrap();
    agent.prompt().await.complete("2");
    turns_ended(&rt, &conv, 2).await;
    assert_eq!(agent.log.count("start"), 1);
}

#[tokio::test]
async fn a_turn_over_its_time_limit_is_cancelled_and_fails_with_turn_timeout() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let mut cfg = config(&dir);
    cfg.turn_timeout = Some(std::time::Duration::from_millis(300));
    let rt = runtime(&dir, cfg, &agent, ManualClock::new(now())).await;
    let conv = conversation(&rt).await;

    within("send", rt.send_message(&conv, msg("slow"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-1");
    // Never ended by the test: only the time limit ends it.
    let _p = agent.prompt().await;
    let evs = turns_ended(&rt, &conv, 1).await;
    match &evs.last().unwrap().payload {
        EventPayload::TurnFailed { code, .. } => assert_eq!(*code, ErrorCode::TurnTimeout),
        other => panic!("not a time-out: {other:?}"),
    }
    assert_eq!(
        agent.log.count("cancel ext-1"),
        1,
        "{:?}",
        agent.log.lines()
    );
    assert_eq!(agent.log.count("shutdown"), 0);
}
