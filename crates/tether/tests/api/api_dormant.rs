//! End to end: a dormant session with nothing to do costs no session actor; the next
//! message, stop, approval answer or delegation continuation brings one back, on the same
//! session (strict resume), and no command is lost to an actor that is exiting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::delegation_util::*;
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, within};

/// Waits until `GET /api/v1/runtime` reports `actors` session actors.
async fn wait_actors(d: &Daemon, want: u64) -> Value {
    within(&format!("{want} session actors"), async {
        loop {
            let f = d.get_ok("/api/v1/runtime").await;
            if f["actors"] == want {
                return f;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

async fn wait_dormant(d: &Daemon, conv: &str) {
    d.wait_conversation(conv, "session dormant", |c| {
        c["binding"]["status"] == "dormant"
    })
    .await;
}

fn ttl_daemon() -> DaemonOptions {
    DaemonOptions {
        extra_config: "[pool]\nmax_live = 1\nidle_ttl_secs = 1\n".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn dormant_sessions_keep_no_actor_and_the_next_message_resumes_the_same_session() {
    let d = Daemon::start(ttl_daemon()).await;
    let mut convs = Vec::new();
    for i in 0..4 {
        let c = d.new_conversation(None).await;
        let (o, t) = d.say_and_wait(&c, &format!("first {i}")).await;
        assert_eq!(t["status"], "completed", "{t}");
        convs.push((c, o["session_id"].as_str().unwrap().to_string()));
    }
    for (c, _) in &convs {
        wait_dormant(&d, c).await;
    }
    let f = wait_actors(&d, 0).await;
    assert_eq!(f["routing_locks"], 0, "{f}");
    let pool = d.get_ok("/api/v1/pool").await;
    assert_eq!(pool["live"], 0, "{pool}");

    // A follow-up message: same session, its history resumed.
    let (c0, s0) = &convs[0];
    let (o, t) = d.say_and_wait(c0, "second 0").await;
    assert_eq!(o["session_id"], s0.as_str());
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["first 0"]"#),
        "{t}"
    );
    wait_dormant(&d, c0).await;
    wait_actors(&d, 0).await;

    // A stop to a dormant idle session finds nothing running and starts nothing.
    let (c1, s1) = &convs[1];
    let (status, body) = d
        .post(&format!("/api/v1/conversations/{c1}/stop"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "nothing_running");
    assert_eq!(d.get_ok("/api/v1/runtime").await["actors"], 0);
    // A turn on it runs in its own session again and can be stopped.
    let o = d.say(c1, "hang").await;
    assert_eq!(o["session_id"], s1.as_str());
    let tid = o["turn_id"].as_str().unwrap().to_string();
    d.wait_conversation(c1, "session live again", |c| {
        c["binding"]["status"] == "live"
    })
    .await;
    let r = d
        .post_ok(&format!("/api/v1/conversations/{c1}/stop"), json!({}))
        .await;
    assert_eq!(r["turn_id"], tid.as_str(), "{r}");
    let t = d.wait_turn(s1, &tid).await;
    assert_eq!(t["status"], "cancelled", "{t}");

    // An approval asked in a session brought back from dormant is answered.
    let (c2, s2) = &convs[2];
    let o = d.say(c2, "approve rm -rf build").await;
    assert_eq!(o["session_id"], s2.as_str());
    let a = d.pending_approval(c2).await;
    let id = a["id"].as_str().unwrap();
    let r = d
        .post_ok(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r["status"], "allowed");
    let t = d.wait_turn(s2, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: allowed"),
        "{t}"
    );
    for (c, _) in &convs {
        wait_dormant(&d, c).await;
    }
    wait_actors(&d, 0).await;
}

#[tokio::test]
async fn a_dormant_delegated_session_is_continued_and_closed_without_an_actor_in_between() {
    let d = Daemon::start(ttl_daemon()).await;
    let parent = d.new_conversation(None).await;
    let task = delegate(&d, &parent, "fake", "first").await;
    let done = wait_task(&d, &parent, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let child_session = bound_session(&d, &task).await;
    wait_dormant(&d, &task).await;
    wait_dormant(&d, &parent).await;
    wait_actors(&d, 0).await;

    let r = d
        .post_ok(
            &format!("/api/v1/conversations/{task}/continue"),
            json!({"message": "second", "continuation_id": "c1"}),
        )
        .await;
    assert_eq!(r["status"], "running", "{r}");
    let turn_id = r["turn_id"].as_str().unwrap();
    let t = d.wait_turn(&child_session, turn_id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["first"]"#),
        "strict resume of the same child session: {t}"
    );
    assert_eq!(bound_session(&d, &task).await, child_session);
    wait_dormant(&d, &task).await;
    wait_actors(&d, 0).await;

    let r = d
        .post_ok(
            &format!("/api/v1/conversations/{task}/close"),
            json!({"continuation_id": "x1"}),
        )
        .await;
    assert_eq!(r["availability"], "released", "{r}");
    wait_actors(&d, 0).await;
}

/// Two conversations share one live slot: each message evicts the other session, whose
/// actor then ends just as that conversation's next message arrives (sent at once). Every
/// message still runs, in its own session, with its whole history.
#[tokio::test]
async fn messages_racing_the_exit_of_an_evicted_sessions_actor_are_never_lost() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[pool]\nmax_live = 1\nidle_ttl_secs = 0\n".into(),
        ..Default::default()
    })
    .await;
    let convs = [
        d.new_conversation(None).await,
        d.new_conversation(None).await,
    ];
    let mut sessions: [Option<String>; 2] = [None, None];
    // Start with one live session: the first message of a round evicts it when the
    // other session starts.
    for i in [0, 1] {
        let (o, t) = d.say_and_wait(&convs[i], "m 0").await;
        assert_eq!(t["status"], "completed", "{t}");
        sessions[i] = o["session_id"].as_str().map(str::to_string);
    }
    let rounds = 30;
    for round in 1..rounds {
        // The first message evicts the other session; the second goes to that session.
        let (first, second) = if round % 2 == 1 { (0, 1) } else { (1, 0) };
        let mut outs = Vec::new();
        for i in [first, second] {
            outs.push((i, d.say(&convs[i], &format!("m {round}")).await));
        }
        for (i, o) in outs {
            let sid = o["session_id"].as_str().unwrap().to_string();
            assert_eq!(
                sessions[i].get_or_insert_with(|| sid.clone()),
                &sid,
                "round {round}: {o}"
            );
            let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
            assert_eq!(t["status"], "completed", "round {round}: {t}");
            assert!(
                t["result_text"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("remembers {round}:")),
                "round {round}: {t}"
            );
        }
    }
    let pool = d.get_ok("/api/v1/pool").await;
    assert!(pool["evictions"].as_u64().unwrap() > 0, "{pool}");
    // At rest: a live session keeps its actor, a dormant one has none.
    within("actors match live sessions", async {
        loop {
            let live = d.get_ok("/api/v1/pool").await["live"].clone();
            if d.get_ok("/api/v1/runtime").await["actors"] == live {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A session whose agent cannot start ends each turn at once, and its actor with it: every
/// next message, sent as soon as the last was accepted, races that exit. None is lost.
#[tokio::test]
async fn messages_racing_the_exit_of_an_actor_whose_agent_cannot_start_all_run() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[agents.ghost]\ndriver = \"acp\"\ncommand = \"/nowhere/ghost-agent\"\n"
            .into(),
        ..Default::default()
    })
    .await;
    let c = d.new_conversation(Some("ghost")).await;
    let mut turns = Vec::new();
    for i in 0..150 {
        let o = d.say(&c, &format!("m {i}")).await;
        let sid = o["session_id"].as_str().unwrap().to_string();
        turns.push((sid, o["turn_id"].as_str().unwrap().to_string()));
    }
    for (sid, tid) in &turns {
        let t = d.wait_turn(sid, tid).await;
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error_code"], "spawn_failed", "{t}");
    }
    wait_actors(&d, 0).await;
}
