//! The session's life in-process: eviction from a full live pool, and recovery after a
//! crash (a scripted agent, a temporary store reopened, no daemon).

mod support;

use support::{
    Agent, ManualClock, ask_permission, config, conversation, count, events, events_until, kinds,
    msg, runtime, temp, turns_ended,
};
use tether_proto::{ApprovalStatus, EventPayload, MessageOutcomeKind, SessionStatus};
use tether_runtime::PoolConfig;
use tether_testkit::within;

fn now() -> i64 {
    tether_store::now_ms()
}

#[tokio::test]
async fn a_full_pool_evicts_the_idle_session_never_the_busy_one() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let mut cfg = config(&dir);
    cfg.pool = PoolConfig {
        max_live: 1,
        max_live_per_owner: 0,
        idle_ttl: None,
        ..PoolConfig::default()
    };
    let rt = runtime(&dir, cfg, &agent, ManualClock::new(now())).await;
    let a = conversation(&rt).await;
    let b = conversation(&rt).await;

    within("send a", rt.send_message(&a, msg("a1"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-a");
    agent.prompt().await.complete("a1");
    turns_ended(&rt, &a, 1).await;
    assert_eq!(rt.pool_status().live, 1);

    // b needs a process: a's, idle, makes room.
    within("send b", rt.send_message(&b, msg("b1"), "test"))
        .await
        .unwrap();
    let evs = events_until(&rt, &a, "a evicted", |evs| {
        count(evs, "session_dormant") == 1
    })
    .await;
    assert!(evs.iter().any(|e| matches!(
        &e.payload,
        EventPayload::SessionDormant { reason } if reason == "evicted: the live pool is full"
    )));
    assert_eq!(agent.log.count("shutdown ext-a"), 1);
    let sa = within("a", rt.get_conversation(&a)).await.unwrap();
    let session_a = sa.binding.expect("a stays bound").session_id;
    let s = within("session a", rt.get_session(&session_a))
        .await
        .unwrap();
    assert_eq!(s.status, SessionStatus::Dormant);
    agent.start().await.ok("ext-b");
    let pb = agent.prompt().await;

    // b is busy: a's next turn resumes a without evicting b (the pool goes over its cap).
    within("send a", rt.send_message(&a, msg("a2"), "test"))
        .await
        .unwrap();
    let resume = agent.start().await;
    assert_eq!(resume.req.resume.as_deref(), Some("ext-a"));
    resume.ok("ext-a");
    let pa = agent.prompt().await;
    assert_eq!(pa.text, "a2");
    assert_eq!(agent.log.count("shutdown ext-b"), 0);
    let evs = events(&rt, &a).await;
    assert!(evs.iter().any(|e| matches!(
        &e.payload,
        EventPayload::SessionLive { external_id, resumed: true } if external_id == "ext-a"
    )));
    pa.complete("a2");
    pb.complete("b1");
    turns_ended(&rt, &a, 2).await;
    turns_ended(&rt, &b, 1).await;
}

/// A crash is the tokio runtime going away under the actors (nothing shuts down); the
/// store is then opened again by a new runtime.
#[test]
fn after_a_crash_recovery_interrupts_open_turns_and_the_session_resumes() {
    let (_tmp, dir) = temp();
    let clock = ManualClock::new(now());
    let runtime_1 = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (conv, mut agent, held) = runtime_1.block_on(async {
        let mut agent = Agent::scripted();
        let rt = runtime(&dir, config(&dir), &agent, clock.clone()).await;
        let conv = conversation(&rt).await;
        within("send", rt.send_message(&conv, msg("one"), "test"))
            .await
            .unwrap();
        agent.start().await.ok("ext-1");
        let p = agent.prompt().await;
        p.delta("partial");
        let answer = ask_permission(&p, "deploy");
        events_until(&rt, &conv, "approval requested", |evs| {
            count(evs, "approval_requested") == 1
        })
        .await;
        let queued = within("queue", rt.send_message(&conv, msg("two"), "test"))
            .await
            .unwrap();
        assert_eq!(queued.outcome, MessageOutcomeKind::Queued);
        (conv, agent, (p, answer))
    });
    runtime_1.shutdown_background();
    drop(held);

    let runtime_2 = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime_2.block_on(async {
        let rt = runtime(&dir, config(&dir), &agent, clock.clone()).await;
        let evs = events(&rt, &conv).await;
        assert_eq!(count(&evs, "turn_interrupted"), 2, "{:?}", kinds(&evs));
        assert!(evs.iter().any(|e| matches!(
            &e.payload,
            EventPayload::ApprovalResolved {
                status: ApprovalStatus::Expired,
                ..
            }
        )));
        let notice = tether_core::restart_notice(2, 1, 0);
        assert!(
            evs.iter().any(|e| e.payload
                == EventPayload::Status {
                    text: notice.clone()
                }),
            "{:?}",
            kinds(&evs)
        );
        let c = within("conversation", rt.get_conversation(&conv))
            .await
            .unwrap();
        let session = c.binding.expect("the binding is kept").session_id;
        let s = within("session", rt.get_session(&session)).await.unwrap();
        assert_eq!(s.status, SessionStatus::Dormant);
        assert_eq!(s.external_id.as_deref(), Some("ext-1"));

        // The next message resumes the same agent session.
        within("send", rt.send_message(&conv, msg("three"), "test"))
            .await
            .unwrap();
        let resume = agent.start().await;
        assert_eq!(resume.req.resume.as_deref(), Some("ext-1"));
        resume.ok("ext-1");
        let p = agent.prompt().await;
        assert_eq!(p.text, "three");
        p.complete("3");
        let evs = turns_ended(&rt, &conv, 3).await;
        assert!(
            evs.iter()
                .any(|e| matches!(&e.payload, EventPayload::SessionLive { resumed: true, .. }))
        );
        assert_eq!(kinds(&evs).last(), Some(&"turn_completed"));
    });
}
