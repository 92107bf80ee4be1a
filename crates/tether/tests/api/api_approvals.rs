//! End to end: approvals and questions by id, first answer wins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions, within};

#[tokio::test]
async fn approvals_are_answered_by_id_and_a_second_answer_is_refused() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;

    let o = d.say(&c, "approve rm -rf build").await;
    let sid = o["session_id"].as_str().unwrap().to_string();
    let a = d.pending_approval(&c).await;
    assert_eq!(a["title"], "rm -rf build");
    assert_eq!(a["status"], "pending");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "bound/waiting_approval");
    assert_eq!(conv["pending_approvals"][0], a["id"]);
    let id = a["id"].as_str().unwrap();
    let r = d
        .post_ok(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r["status"], "allowed");
    let (status, body) = d
        .post(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "approval_already_resolved");
    let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: allowed"),
        "{t}"
    );

    // Deny through the API.
    let o = d.say(&c, "approve deploy").await;
    let a = d.pending_approval(&c).await;
    d.post_ok(
        &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
        json!({"decision": "deny"}),
    )
    .await;
    let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: denied"),
        "{t}"
    );

    // /approve with a short id prefix, from the chat.
    let o = d.say(&c, "approve push").await;
    let a = d.pending_approval(&c).await;
    let short = &a["id"].as_str().unwrap()[..8];
    let r = d.say(&c, &format!("/approve {short}")).await;
    assert_eq!(r["outcome"], "command");
    let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: allowed"),
        "{t}"
    );

    // Bare /deny with exactly one pending.
    let o = d.say(&c, "approve format disk").await;
    d.pending_approval(&c).await;
    d.say(&c, "/deny").await;
    let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: denied"),
        "{t}"
    );

    // Unknown approval id.
    let (status, body) = d
        .post("/api/v1/approvals/nope", json!({"decision": "allow"}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    // Bad decision.
    let (status, body) = d
        .post(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "maybe"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn questions_are_answered_through_the_api_or_a_plain_message() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let o = d.say(&c, "ask which branch?").await;
    let sid = o["session_id"].as_str().unwrap().to_string();
    let q = within("question pending", async {
        loop {
            let list = d.get_ok("/api/v1/questions?status=pending").await;
            if let Some(q) = list.as_array().unwrap().first() {
                return q.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(q["prompt"], "which branch?");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "bound/waiting_user");
    let qid = q["id"].as_str().unwrap();
    d.post_ok(
        &format!("/api/v1/questions/{qid}"),
        json!({"answer": "main"}),
    )
    .await;
    let (status, body) = d
        .post(
            &format!("/api/v1/questions/{qid}"),
            json!({"answer": "dev"}),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "question_already_resolved");
    let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("answer: main"),
        "{t}"
    );

    // A plain message answers the pending question.
    let o = d.say(&c, "ask which color?").await;
    d.wait_conversation(&c, "waiting for the person", |c| {
        c["state"] == "bound/waiting_user"
    })
    .await;
    let r = d.say(&c, "blue").await;
    assert_eq!(r["outcome"], "answered");
    let t = d.wait_turn(&sid, o["turn_id"].as_str().unwrap()).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("answer: blue"),
        "{t}"
    );
}

#[tokio::test]
async fn an_unanswered_approval_expires_at_its_deadline() {
    let d = Daemon::start(DaemonOptions {
        approval_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let o = d.say(&c, "approve slow human").await;
    let a = d.pending_approval(&c).await;
    let t = d
        .wait_turn(
            o["session_id"].as_str().unwrap(),
            o["turn_id"].as_str().unwrap(),
        )
        .await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: denied"),
        "{t}"
    );
    let list = d.get_ok("/api/v1/approvals").await;
    let a = list
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == a["id"])
        .unwrap();
    assert_eq!(a["status"], "expired");
}
