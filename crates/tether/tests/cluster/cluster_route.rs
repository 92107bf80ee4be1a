//! End to end: commands through the database (issue 12, design point 4). Three `tether
//! serve` nodes on one PostgreSQL database and one agent home: a conversation's commands
//! run on its owner node whichever node they reach (the owner's pool holds the session,
//! the others' do not), with the owner's answer and the owner's error codes; approvals
//! are answered from any node, the first answer winning; with `NOTIFY` off the commands
//! are found by polling; a node at `max_live_per_node` hands a new conversation to the
//! least-loaded node; a command whose owner dies before taking it is routed again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Cluster, Daemon, DaemonOptions, within};

fn options(extra: &str) -> DaemonOptions {
    let mut options = crate::common::node_options(2);
    options.extra_config.push_str(extra);
    options
}

async fn say_on(d: &Daemon, conv: &str, body: Value) -> (u16, Value) {
    d.post(&format!("/api/v1/conversations/{conv}/messages"), body)
        .await
}

/// Waits until `conv`'s binding on `d` says `status`.
async fn wait_binding(d: &Daemon, conv: &str, status: &str) -> Value {
    d.wait_conversation(conv, &format!("binding {status}"), |c| {
        c["binding"]["status"] == status
    })
    .await
}

#[tokio::test]
async fn a_message_sent_to_another_node_runs_on_the_owner_and_gets_its_answer() {
    let cluster = Cluster::start(3, options("")).await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let conv = b.new_conversation(None).await;
    let (first, t1) = a.say_and_wait(&conv, "alpha one").await;
    let session = first["session_id"].as_str().unwrap().to_owned();
    assert_eq!(t1["status"], "completed", "{t1}");
    assert!(
        a.pool_sessions().await.contains(&session),
        "{} {} {} {first}",
        a.get_ok("/api/v1/pool").await,
        b.get_ok("/api/v1/pool").await,
        c.get_ok("/api/v1/pool").await,
    );

    // Sent to b: it runs in a's session (the owner's actor), and the outcome is a's.
    let (status, out) = say_on(b, &conv, json!({"text": "sleep 1500"})).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["outcome"], "started", "{out}");
    assert_eq!(out["session_id"], session.as_str(), "{out}");
    // Sent to c while it runs: queued behind it, by the owner's queue.
    let (status, queued) = say_on(c, &conv, json!({"text": "alpha two"})).await;
    assert_eq!(status, 200, "{queued}");
    assert_eq!(queued["outcome"], "queued", "{queued}");
    assert_eq!(queued["queue_position"], 1, "{queued}");
    let last = c
        .wait_turn(&session, queued["turn_id"].as_str().unwrap())
        .await;
    assert_eq!(last["status"], "completed", "{last}");
    assert!(
        last["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["alpha one","sleep 1500"]"#),
        "{last}"
    );
    assert!(a.pool_sessions().await.contains(&session));
    assert!(b.pool_sessions().await.is_empty());
    assert!(c.pool_sessions().await.is_empty());
}

#[tokio::test]
async fn stop_new_session_and_detach_work_from_any_node() {
    let cluster = Cluster::start(3, options("")).await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let conv = a.new_conversation(None).await;
    let running = a.say(&conv, "hang").await;
    let session = running["session_id"].as_str().unwrap().to_owned();
    wait_binding(c, &conv, "live").await;

    // Stopped from b: the owner's actor cancels it.
    let (status, stopped) = b
        .post(&format!("/api/v1/conversations/{conv}/stop"), json!({}))
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["session_id"], session.as_str(), "{stopped}");
    let turn = c
        .wait_turn(&session, running["turn_id"].as_str().unwrap())
        .await;
    assert_eq!(turn["status"], "cancelled", "{turn}");
    // Nothing runs now: the owner's answer, with its code, from c.
    let (status, none) = c
        .post(&format!("/api/v1/conversations/{conv}/stop"), json!({}))
        .await;
    assert_eq!(
        (status, none["error"]["code"].as_str()),
        (409, Some("nothing_running")),
        "{none}"
    );

    // A new session from c, then a message from b runs in it on the owner.
    let (status, fresh) = c
        .post(
            &format!("/api/v1/conversations/{conv}/new-session"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{fresh}");
    let (status, next) = say_on(b, &conv, json!({"text": "beta one"})).await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(next["new_session"], "explicit", "{next}");
    let second = next["session_id"].as_str().unwrap().to_owned();
    assert_ne!(second, session);
    a.wait_turn(&second, next["turn_id"].as_str().unwrap())
        .await;
    // The new session runs on one node: the owner still (a), or b when the conversation
    // was released once the old session's actor retired (the next node then claims it).
    let (on_a, on_b) = (
        a.pool_sessions().await.contains(&second),
        b.pool_sessions().await.contains(&second),
    );
    assert!(on_a != on_b, "on a: {on_a}, on b: {on_b}");

    // Detached from b: unbound everywhere.
    let (status, detached) = b
        .post(&format!("/api/v1/conversations/{conv}/detach"), json!({}))
        .await;
    assert_eq!(status, 200, "{detached}");
    let view = c.get_ok(&format!("/api/v1/conversations/{conv}")).await;
    assert!(view["binding"].is_null(), "{view}");
}

#[tokio::test]
async fn approvals_and_questions_are_answered_on_any_node_and_the_first_answer_wins() {
    let cluster = Cluster::start(3, options("")).await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let conv = a.new_conversation(None).await;
    let asked = a.say(&conv, "approve rm -rf build").await;
    let approval = c.pending_approval(&conv).await;
    let id = approval["id"].as_str().unwrap();

    let (status, answered) = c
        .post(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["status"], "allowed", "{answered}");
    // The owner's actor was told: the turn goes on and ends.
    let turn = b
        .wait_turn(
            asked["session_id"].as_str().unwrap(),
            asked["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains("approval: allowed"),
        "{turn}"
    );

    let (status, again) = b
        .post(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(
        again["error"]["code"], "approval_already_resolved",
        "{again}"
    );

    // A question the same way: answered from b, the second answer from c refused, and a
    // plain message sent to c answers the next one on the owner.
    let asked = a.say(&conv, "ask which branch?").await;
    let question = within("a question is pending", async {
        loop {
            let list = b.get_ok("/api/v1/questions?status=pending").await;
            if let Some(q) = list.as_array().unwrap().first() {
                return q.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let qid = question["id"].as_str().unwrap();
    let (status, answered) = b
        .post(
            &format!("/api/v1/questions/{qid}"),
            json!({"answer": "main"}),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let (status, again) = c
        .post(
            &format!("/api/v1/questions/{qid}"),
            json!({"answer": "dev"}),
        )
        .await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(
        again["error"]["code"], "question_already_resolved",
        "{again}"
    );
    let session = asked["session_id"].as_str().unwrap();
    let turn = c
        .wait_turn(session, asked["turn_id"].as_str().unwrap())
        .await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .starts_with("answer: main"),
        "{turn}"
    );

    let asked = a.say(&conv, "ask which color?").await;
    c.wait_conversation(&conv, "waiting for the person", |v| {
        v["state"] == "bound/waiting_user"
    })
    .await;
    let (status, reply) = c
        .post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({"text": "blue"}),
        )
        .await;
    assert_eq!(
        (status, reply["outcome"].as_str()),
        (200, Some("answered")),
        "{reply}"
    );
    let turn = b
        .wait_turn(session, asked["turn_id"].as_str().unwrap())
        .await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .starts_with("answer: blue"),
        "{turn}"
    );
}

#[tokio::test]
async fn errors_keep_their_codes_across_nodes() {
    let cluster = Cluster::start(
        3,
        DaemonOptions {
            queue_cap: 1,
            ..options("")
        },
    )
    .await;
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let conv = a.new_conversation(None).await;
    let running = a.say(&conv, "hang").await;
    assert_eq!(running["outcome"], "started", "{running}");

    let (status, unknown) = say_on(b, &conv, json!({"text": "hi", "agent": "nosuch"})).await;
    assert_eq!(
        (status, unknown["error"]["code"].as_str()),
        (400, Some("unknown_agent")),
        "{unknown}"
    );
    let (status, bad) = say_on(c, &conv, json!({"text": "/model"})).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (400, Some("invalid_command")),
        "{bad}"
    );

    // The owner's queue holds one: the next is refused there, with its code.
    let (status, queued) = say_on(b, &conv, json!({"text": "one"})).await;
    assert_eq!(
        (status, queued["outcome"].as_str()),
        (200, Some("queued")),
        "{queued}"
    );
    let (status, full) = say_on(c, &conv, json!({"text": "two"})).await;
    assert_eq!(
        (status, full["error"]["code"].as_str()),
        (429, Some("queue_full")),
        "{full}"
    );
}

#[tokio::test]
async fn with_notify_off_commands_are_still_answered_by_polling() {
    let cluster = Cluster::start(
        2,
        DaemonOptions {
            capture_stderr: true,
            ..options("notices = false\n")
        },
    )
    .await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let conv = a.new_conversation(None).await;
    let (first, _) = a.say_and_wait(&conv, "gamma one").await;
    let session = first["session_id"].as_str().unwrap().to_owned();

    let (status, out) = say_on(b, &conv, json!({"text": "gamma two"})).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["session_id"], session.as_str(), "{out}");
    let turn = b
        .wait_turn(&session, out["turn_id"].as_str().unwrap())
        .await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains("remembers 1"),
        "{turn}"
    );
    assert!(b.pool_sessions().await.is_empty());
    let (status, stopped) = b
        .post(&format!("/api/v1/conversations/{conv}/stop"), json!({}))
        .await;
    assert_eq!(
        (status, stopped["error"]["code"].as_str()),
        (409, Some("nothing_running")),
        "{stopped}"
    );
    for d in [a, b] {
        assert!(
            d.stderr_log().contains("found by polling only"),
            "notices were not off"
        );
    }
}

#[tokio::test]
async fn a_node_at_its_cap_hands_a_new_conversation_to_the_least_loaded_node() {
    let cluster = Cluster::start(3, options("max_live_per_node = 1\n")).await;
    let a = cluster.node(0);
    let first = a.new_conversation(None).await;
    let (one, _) = a.say_and_wait(&first, "delta one").await;
    let s1 = one["session_id"].as_str().unwrap().to_owned();

    // a owns one conversation: the next one it is sent goes to another node.
    let second = a.new_conversation(None).await;
    let (two, _) = a.say_and_wait(&second, "delta two").await;
    let s2 = two["session_id"].as_str().unwrap().to_owned();
    assert_eq!(a.pool_sessions().await, vec![s1.clone()]);
    let mut holders = Vec::new();
    for i in 1..3 {
        if cluster.node(i).pool_sessions().await.contains(&s2) {
            holders.push(i);
        }
    }
    assert_eq!(holders.len(), 1, "exactly one other node runs it");
    // And its next message, sent to a, runs there too (it is the owner now).
    let (three, _) = a.say_and_wait(&second, "delta three").await;
    assert_eq!(three["session_id"], s2.as_str());
    assert!(cluster.node(holders[0]).pool_sessions().await.contains(&s2));
    assert_eq!(a.pool_sessions().await, vec![s1]);
}

#[tokio::test]
async fn a_command_whose_owner_dies_before_taking_it_is_routed_again() {
    let cluster = Cluster::start(
        2,
        DaemonOptions {
            capture_stderr: true,
            ..options("")
        },
    )
    .await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let conv = a.new_conversation(None).await;
    let (first, _) = a.say_and_wait(&conv, "epsilon one").await;
    let session = first["session_id"].as_str().unwrap().to_owned();

    // a stops answering anything: b's command waits for it until its lease ends, then
    // b gives it up and runs it itself (resuming the session from the shared home).
    a.sigstop();
    let sent = within("the command is routed again", async {
        say_on(b, &conv, json!({"text": "epsilon two"})).await
    })
    .await;
    a.sigcont();
    let (status, out) = sent;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["session_id"], session.as_str(), "{out}");
    let turn = b
        .wait_turn(&session, out["turn_id"].as_str().unwrap())
        .await;
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["epsilon one"]"#),
        "{turn}"
    );
    assert!(b.pool_sessions().await.contains(&session));
    // It went to a first, and came back when a's lease ended.
    assert!(
        b.stderr_log().contains("routing it again"),
        "b never forwarded the command"
    );
}
