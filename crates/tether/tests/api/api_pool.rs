//! End to end: the live pool keeps processes within caps, evicts oldest-idle-first and
//! after the idle TTL; eviction only makes a session dormant.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_testkit::{Daemon, DaemonOptions};

#[tokio::test]
async fn a_second_session_evicts_the_first_at_cap_one_and_the_first_resumes() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[pool]\nmax_live = 1\nidle_ttl_secs = 0\n".into(),
        ..Default::default()
    })
    .await;
    let a = d.new_conversation(None).await;
    let b = d.new_conversation(None).await;
    let (oa, _) = d.say_and_wait(&a, "alpha one").await;
    let sa = oa["session_id"].as_str().unwrap().to_string();
    let pool = d.get_ok("/api/v1/pool").await;
    assert_eq!(
        (pool["live"].as_u64(), pool["idle"].as_u64()),
        (Some(1), Some(1)),
        "{pool}"
    );

    d.say_and_wait(&b, "beta one").await;
    let ca = d
        .wait_conversation(&a, "first session evicted", |c| {
            c["binding"]["status"] == "dormant"
        })
        .await;
    assert_eq!(
        ca["binding"]["session_id"],
        sa.as_str(),
        "eviction keeps the binding"
    );
    let pool = d.get_ok("/api/v1/pool").await;
    assert_eq!(pool["evictions"], 1, "{pool}");
    assert_eq!(pool["live"], 1, "{pool}");

    // The evicted session resumes with its history; that evicts the other one.
    let (oa2, ta2) = d.say_and_wait(&a, "alpha two").await;
    assert_eq!(oa2["session_id"], sa.as_str());
    assert!(
        ta2["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["alpha one"]"#),
        "{ta2}"
    );
    d.wait_conversation(&b, "second session evicted", |c| {
        c["binding"]["status"] == "dormant"
    })
    .await;
    let status = d.say(&a, "/status").await;
    assert!(
        status["reply"].as_str().unwrap().contains("pool: 1 live"),
        "{status}"
    );
    assert!(
        status["reply"].as_str().unwrap().contains("2 evictions"),
        "{status}"
    );
    let events = d
        .get_ok(&format!("/api/v1/sessions/{sa}/events?limit=1000"))
        .await;
    let dormant = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["type"] == "session_dormant")
        .count();
    assert_eq!(dormant, 1);
}

#[tokio::test]
async fn an_idle_session_is_evicted_after_the_ttl_and_resumes() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[pool]\nidle_ttl_secs = 1\n".into(),
        ..Default::default()
    })
    .await;
    let a = d.new_conversation(None).await;
    let (o, _) = d.say_and_wait(&a, "hello").await;
    d.wait_conversation(&a, "evicted after the TTL", |c| {
        c["binding"]["status"] == "dormant"
    })
    .await;
    let (o2, t2) = d.say_and_wait(&a, "again").await;
    assert_eq!(o2["session_id"], o["session_id"]);
    assert!(
        t2["result_text"].as_str().unwrap().contains("remembers 1:"),
        "{t2}"
    );
}
