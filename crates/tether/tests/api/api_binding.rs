//! End to end through the HTTP API with the fake agent: continuity and the binding rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions};

#[tokio::test]
async fn follow_ups_continue_the_same_session_after_completed_and_failed_turns() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let (out1, t1) = d.say_and_wait(&c, "first message").await;
    assert_eq!(out1["outcome"], "started");
    assert_eq!(out1["new_session"], "unbound");
    assert_eq!(t1["status"], "completed");
    assert!(
        t1["result_text"]
            .as_str()
            .unwrap()
            .starts_with("echo: first message")
    );
    let sid = out1["session_id"].as_str().unwrap().to_string();

    let (out2, t2) = d.say_and_wait(&c, "second").await;
    assert_eq!(out2["session_id"], sid.as_str());
    assert!(out2["new_session"].is_null());
    assert!(
        t2["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["first message"]"#),
        "{t2}"
    );

    // A failed turn ends the turn, never the binding.
    let (out3, t3) = d.say_and_wait(&c, "fail").await;
    assert_eq!(out3["session_id"], sid.as_str());
    assert_eq!(t3["status"], "failed");
    assert_eq!(t3["error_code"], "agent_error");
    let (out4, t4) = d.say_and_wait(&c, "after failure").await;
    assert_eq!(out4["session_id"], sid.as_str());
    assert!(
        t4["result_text"].as_str().unwrap().contains("remembers 3:"),
        "{t4}"
    );

    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "bound/idle");
    assert_eq!(conv["binding"]["session_id"], sid.as_str());
    assert_eq!(conv["binding"]["status"], "live");
}

#[tokio::test]
async fn new_detach_and_drift_start_new_sessions_with_reasons() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let (o1, _) = d.say_and_wait(&c, "hello").await;
    let s1 = o1["session_id"].as_str().unwrap().to_string();

    // Bare /new unbinds; the next message starts a new session (explicit).
    let r = d.say(&c, "/new").await;
    assert_eq!(r["outcome"], "command");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound");
    let (o2, t2) = d.say_and_wait(&c, "fresh start").await;
    let s2 = o2["session_id"].as_str().unwrap().to_string();
    assert_ne!(s1, s2);
    assert_eq!(o2["new_session"], "explicit");
    assert!(
        t2["result_text"]
            .as_str()
            .unwrap()
            .contains("remembers 0: []"),
        "{t2}"
    );

    // /new <task> starts a new session at once.
    let o3 = d.say(&c, "/new do the thing").await;
    assert_eq!(o3["outcome"], "started");
    assert_eq!(o3["new_session"], "explicit");
    let s3 = o3["session_id"].as_str().unwrap().to_string();
    assert_ne!(s3, s2);
    let t3 = d.wait_turn(&s3, o3["turn_id"].as_str().unwrap()).await;
    assert!(
        t3["result_text"]
            .as_str()
            .unwrap()
            .starts_with("echo: do the thing")
    );

    // /new <agent> <task>.
    let o4 = d.say(&c, "/new fake2 other agent task").await;
    let s4 = o4["session_id"].as_str().unwrap().to_string();
    let session = d.get_ok(&format!("/api/v1/sessions/{s4}")).await;
    assert_eq!(session["agent"], "fake2");
    d.wait_turn(&s4, o4["turn_id"].as_str().unwrap()).await;

    // /detach unbinds.
    let r = d.say(&c, "/detach").await;
    assert_eq!(r["outcome"], "command");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound");
    assert!(conv["binding"].is_null());
    let (o5, _) = d.say_and_wait(&c, "after detach").await;
    assert_eq!(o5["new_session"], "unbound");
    let s5 = o5["session_id"].as_str().unwrap().to_string();

    // Model drift.
    let o6 = d
        .post_ok(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "with a model", "model": "big-model"}),
        )
        .await;
    assert_eq!(o6["new_session"], "drift");
    let s6 = o6["session_id"].as_str().unwrap().to_string();
    assert_ne!(s6, s5);
    d.wait_turn(&s6, o6["turn_id"].as_str().unwrap()).await;
    // Same model again: reuse.
    let o7 = d
        .post_ok(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "same model", "model": "big-model"}),
        )
        .await;
    assert_eq!(o7["session_id"], s6.as_str());
    d.wait_turn(&s6, o7["turn_id"].as_str().unwrap()).await;

    // Agent drift.
    let o8 = d
        .post_ok(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "other agent", "agent": "fake"}),
        )
        .await;
    assert_eq!(o8["new_session"], "drift");
    d.wait_turn(
        o8["session_id"].as_str().unwrap(),
        o8["turn_id"].as_str().unwrap(),
    )
    .await;

    let history = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages?limit=500"))
        .await;
    let statuses: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "status")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(
        statuses
            .iter()
            .any(|s| s.contains("model changed") && s.contains("big-model")),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().any(|s| s.contains("agent changed")),
        "{statuses:?}"
    );

    // New Session and Detach endpoints act on the server.
    let r = d
        .post_ok(&format!("/api/v1/conversations/{c}/new-session"), json!({}))
        .await;
    assert_eq!(r["outcome"], "command");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound");

    // /sessions lists them all.
    let r = d.say(&c, "/sessions").await;
    assert!(r["reply"].as_str().unwrap().lines().count() >= 6, "{r}");
}

#[tokio::test]
async fn messages_during_a_turn_are_queued_and_run_in_order_in_the_same_session() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let o1 = d.say(&c, "stream 5 100").await;
    assert_eq!(o1["outcome"], "started");
    let o2 = d.say(&c, "queued one").await;
    assert_eq!(o2["outcome"], "queued");
    assert_eq!(o2["queue_position"], 1);
    let o3 = d.say(&c, "queued two").await;
    assert_eq!(o3["queue_position"], 2);
    assert_eq!(o2["session_id"], o1["session_id"]);
    let sid = o1["session_id"].as_str().unwrap();
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["queue_len"], 2);
    assert_eq!(conv["state"], "bound/running");
    let t3 = d.wait_turn(sid, o3["turn_id"].as_str().unwrap()).await;
    assert!(
        t3["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["stream 5 100","queued one"]"#),
        "{t3}"
    );
    let turns = d.all_turns(sid).await;
    let order: Vec<&str> = turns
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["input"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec!["stream 5 100", "queued one", "queued two"]);
}

#[tokio::test]
async fn stop_during_a_slow_stream_gives_exactly_one_cancelled_event() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let o = d.say(&c, "stream 100 100").await;
    let sid = o["session_id"].as_str().unwrap().to_string();
    let tid = o["turn_id"].as_str().unwrap().to_string();
    // Wait until some output streamed.
    tether_testkit::within("first delta", async {
        loop {
            let page = d.get_ok(&format!("/api/v1/sessions/{sid}/events")).await;
            if page["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["payload"]["type"] == "message_delta")
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let r = d
        .post_ok(&format!("/api/v1/conversations/{c}/stop"), json!({}))
        .await;
    assert_eq!(r["turn_id"], tid.as_str());
    let t = d.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "cancelled");
    // A second stop finds nothing running.
    let (status, body) = d
        .post(&format!("/api/v1/conversations/{c}/stop"), json!({}))
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "nothing_running");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let page = d
        .get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
        .await;
    let terminal: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["type"].as_str().unwrap())
        .filter(|k| {
            matches!(
                *k,
                "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted"
            )
        })
        .collect();
    assert_eq!(terminal, vec!["turn_cancelled"]);
    // The session continues after a cancelled turn.
    let (o2, t2) = d.say_and_wait(&c, "after stop").await;
    assert_eq!(o2["session_id"], sid.as_str());
    assert!(
        t2["result_text"].as_str().unwrap().contains("remembers 1:"),
        "{t2}"
    );
}
