//! End to end through the HTTP API with the fake agent: the finer binding rules — model
//! and agent preferences, what a conversation shows after it leaves a session, and the
//! replies of `/new`, `/status`, `/approve`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, within};

async fn send(d: &Daemon, conv: &str, body: Value) -> Value {
    d.post_ok(&format!("/api/v1/conversations/{conv}/messages"), body)
        .await
}

async fn wait_out(d: &Daemon, out: &Value) -> Value {
    d.wait_turn(
        out["session_id"].as_str().unwrap(),
        out["turn_id"].as_str().unwrap(),
    )
    .await
}

async fn session_model(d: &Daemon, out: &Value) -> Value {
    let sid = out["session_id"].as_str().unwrap();
    d.get_ok(&format!("/api/v1/sessions/{sid}")).await["model"].clone()
}

async fn statuses(d: &Daemon, conv: &str) -> Vec<String> {
    let history = d
        .get_ok(&format!("/api/v1/conversations/{conv}/messages?limit=500"))
        .await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "status")
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect()
}

async fn approval(d: &Daemon, id: &str) -> Value {
    let list = d.get_ok("/api/v1/approvals").await;
    list.as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap()
        .clone()
}

#[tokio::test]
async fn back_to_the_default_model_starts_a_new_session_by_command_and_by_api() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let o1 = send(&d, &c, json!({"text": "one", "model": "big-model"})).await;
    wait_out(&d, &o1).await;
    assert_eq!(session_model(&d, &o1).await, "big-model");

    // The command says a new session comes, and the next message starts one.
    let r = d.say(&c, "/model default").await;
    assert!(
        r["reply"]
            .as_str()
            .unwrap()
            .contains("the next message starts a new fake session"),
        "{r}"
    );
    let (o2, _) = d.say_and_wait(&c, "two").await;
    assert_eq!(o2["new_session"], "drift", "{o2}");
    assert_ne!(o2["session_id"], o1["session_id"]);
    assert!(session_model(&d, &o2).await.is_null());
    assert!(
        statuses(&d, &c)
            .await
            .iter()
            .any(|s| s == "model changed from big-model to default: started a new session"),
        "{:?}",
        statuses(&d, &c).await
    );

    // Through the API: "model": "default" asks for the agent's default explicitly.
    let o3 = send(&d, &c, json!({"text": "three", "model": "big-model"})).await;
    assert_eq!(o3["new_session"], "drift");
    wait_out(&d, &o3).await;
    let o4 = send(&d, &c, json!({"text": "four", "model": "default"})).await;
    assert_eq!(o4["new_session"], "drift", "{o4}");
    assert_ne!(o4["session_id"], o3["session_id"]);
    wait_out(&d, &o4).await;
    assert!(session_model(&d, &o4).await.is_null());
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert!(conv["model"].is_null(), "{conv}");
    // Absent and blank keep the preference: the same session again.
    let o5 = send(&d, &c, json!({"text": "five", "model": " "})).await;
    assert_eq!(o5["session_id"], o4["session_id"]);
    wait_out(&d, &o5).await;

    // A conversation created with "default" has no model preference.
    let created = d
        .post_ok("/api/v1/conversations", json!({"model": "DEFAULT"}))
        .await;
    assert!(created["model"].is_null(), "{created}");
}

#[tokio::test]
async fn naming_the_same_agent_keeps_the_model_and_another_agent_resets_it() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let created = d
        .post_ok(
            "/api/v1/conversations",
            json!({"agent": "fake", "model": "big-model"}),
        )
        .await;
    let c = created["id"].as_str().unwrap().to_string();
    let (o1, _) = d.say_and_wait(&c, "hello").await;
    assert_eq!(session_model(&d, &o1).await, "big-model");

    let r = d.say(&c, "/agent fake").await;
    assert_eq!(r["reply"], "agent set to fake (model big-model)", "{r}");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["model"], "big-model", "{conv}");
    let (o2, _) = d.say_and_wait(&c, "still here").await;
    assert_eq!(o2["session_id"], o1["session_id"], "{o2}");

    let o3 = d.say(&c, "/new fake fresh").await;
    assert_eq!(o3["new_session"], "explicit");
    wait_out(&d, &o3).await;
    assert_eq!(session_model(&d, &o3).await, "big-model");

    let r = d.say(&c, "/agent fake2").await;
    assert!(
        r["reply"].as_str().unwrap().starts_with(
            "agent set to fake2 (model default): the next message starts a new fake2 session"
        ),
        "{r}"
    );
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert!(conv["model"].is_null(), "{conv}");
}

#[tokio::test]
async fn leaving_a_session_cancels_its_pending_approval_and_the_new_session_is_idle() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;

    // /new while the bound session waits on an approval.
    let o1 = d.say(&c, "approve rm -rf build").await;
    let a1 = d.pending_approval(&c).await;
    let r = d.say(&c, "/new").await;
    assert_eq!(r["outcome"], "command");
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound");
    assert_eq!(conv["pending_approvals"], json!([]), "{conv}");
    assert_eq!(
        approval(&d, a1["id"].as_str().unwrap()).await["status"],
        "cancelled"
    );
    let t1 = wait_out(&d, &o1).await;
    assert!(
        t1["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: denied"),
        "{t1}"
    );
    let short = &a1["id"].as_str().unwrap()[..8];
    assert!(
        statuses(&d, &c).await.iter().any(|s| s
            == &format!(
                "approval {short} (\"rm -rf build\") cancelled: this conversation left the \
                 session that asked it (denied)"
            )),
        "{:?}",
        statuses(&d, &c).await
    );
    let (o2, _) = d.say_and_wait(&c, "hello").await;
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "bound/idle", "{conv}");
    assert_eq!(conv["binding"]["session_id"], o2["session_id"]);

    // Drift while the bound session waits on an approval.
    let o3 = d.say(&c, "approve deploy").await;
    let a3 = d.pending_approval(&c).await;
    let o4 = send(&d, &c, json!({"text": "other model", "model": "big-model"})).await;
    assert_eq!(o4["new_session"], "drift");
    wait_out(&d, &o4).await;
    wait_out(&d, &o3).await;
    assert_eq!(
        approval(&d, a3["id"].as_str().unwrap()).await["status"],
        "cancelled"
    );
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "bound/idle", "{conv}");
    assert_eq!(conv["pending_approvals"], json!([]), "{conv}");

    // /detach while the agent waits on a question: the question is cancelled too.
    let o5 = d.say(&c, "ask which branch?").await;
    let conv = d
        .wait_conversation(&c, "question pending", |c| {
            c["state"] == "bound/waiting_user"
        })
        .await;
    let qid = conv["pending_questions"][0].as_str().unwrap().to_string();
    d.post_ok(&format!("/api/v1/conversations/{c}/detach"), json!({}))
        .await;
    wait_out(&d, &o5).await;
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["pending_questions"], json!([]), "{conv}");
    let questions = d.get_ok("/api/v1/questions").await;
    let q = questions
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == qid.as_str())
        .unwrap();
    assert_eq!(q["status"], "cancelled", "{q}");
    assert!(
        statuses(&d, &c)
            .await
            .iter()
            .any(|s| s.starts_with(&format!(
                "question {} (\"which branch?\") cancelled",
                &qid[..8]
            ))),
        "{:?}",
        statuses(&d, &c).await
    );
}

#[tokio::test]
async fn a_second_approve_command_says_already_resolved_like_the_api() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let o = d.say(&c, "approve push").await;
    let a = d.pending_approval(&c).await;
    let id = a["id"].as_str().unwrap();
    d.say(&c, &format!("/approve {id}")).await;
    wait_out(&d, &o).await;
    for typed in [format!("/approve {id}"), format!("/deny {}", &id[..8])] {
        let (status, body) = d
            .post(
                &format!("/api/v1/conversations/{c}/messages"),
                json!({"text": typed}),
            )
            .await;
        assert_eq!(status, 409, "{typed}: {body}");
        assert_eq!(body["error"]["code"], "approval_already_resolved", "{body}");
    }
    let (status, body) = d
        .post(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (409, "approval_already_resolved")
    );
}

#[tokio::test]
async fn an_expired_approval_says_so_in_the_history() {
    let d = Daemon::start(DaemonOptions {
        approval_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let o = d.say(&c, "approve slow human").await;
    let a = d.pending_approval(&c).await;
    wait_out(&d, &o).await;
    let short = &a["id"].as_str().unwrap()[..8];
    let lines = statuses(&d, &c).await;
    let line = lines
        .iter()
        .find(|s| s.starts_with(&format!("approval {short} (\"slow human\") expired at ")))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        line.ends_with(" UTC after 1s without an answer: denied"),
        "{line}"
    );
}

#[tokio::test]
async fn status_shows_a_pending_agent_or_model_switch() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    d.say_and_wait(&c, "hello").await;
    let r = d.say(&c, "/status").await;
    assert!(
        !r["reply"].as_str().unwrap().contains("pending switch"),
        "{r}"
    );
    d.say(&c, "/model big-model").await;
    let r = d.say(&c, "/status").await;
    assert!(
        r["reply"].as_str().unwrap().contains(
            "pending switch: model default → big-model (the next message starts a new session)"
        ),
        "{r}"
    );
    d.say(&c, "/agent fake2").await;
    let r = d.say(&c, "/status").await;
    assert!(
        r["reply"]
            .as_str()
            .unwrap()
            .contains("pending switch: agent fake → fake2 (the next message starts a new session)"),
        "{r}"
    );
    // Back to what the session has: nothing pending.
    d.say(&c, "/agent fake").await;
    let r = d.say(&c, "/status").await;
    assert!(
        !r["reply"].as_str().unwrap().contains("pending switch"),
        "{r}"
    );
}

#[tokio::test]
async fn new_with_a_word_that_is_no_agent_says_the_word_went_into_the_task() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let o = d.say(&c, "/new fakee fix the bug").await;
    assert_eq!(o["outcome"], "started");
    assert_eq!(o["new_session"], "explicit");
    let reply = o["reply"].as_str().unwrap();
    assert!(
        reply.contains("started a new fake session with the task: fakee fix the bug"),
        "{reply}"
    );
    assert!(reply.contains("\"fakee\" is not an agent name"), "{reply}");
    let t = wait_out(&d, &o).await;
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .starts_with("echo: fakee fix the bug"),
        "{t}"
    );
    // With an agent named, nothing to explain.
    let o = d.say(&c, "/new fake2 go").await;
    assert!(
        !o["reply"]
            .as_str()
            .unwrap_or("")
            .contains("is not an agent name"),
        "{o}"
    );
}

#[tokio::test]
async fn an_unknown_agent_is_refused_everywhere() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let (status, body) = d
        .post("/api/v1/conversations", json!({"agent": "nobody"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (400, "unknown_agent")
    );
    let c = d.new_conversation(None).await;
    for body in [
        json!({"text": "/agent nobody"}),
        json!({"text": "hello", "agent": "nobody"}),
    ] {
        let (status, resp) = d
            .post(&format!("/api/v1/conversations/{c}/messages"), body.clone())
            .await;
        assert_eq!(
            (status, resp["error"]["code"].as_str().unwrap()),
            (400, "unknown_agent"),
            "{body}: {resp}"
        );
    }
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["agent"], "fake");
    assert_eq!(conv["state"], "unbound");

    // A delegated conversation does not drop a named agent or model silently either.
    let args = json!({"agent_type": "fake2", "task": "child work"});
    let (_, parent_turn) = d
        .say_and_wait(&c, &format!("mcp delegate_to_agent {args}"))
        .await;
    let text = parent_turn["result_text"].as_str().unwrap();
    let task = text
        .lines()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v["task_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no task id: {text}"));
    let cases = [
        (json!({"text": "more", "agent": "nobody"}), "unknown_agent"),
        (json!({"text": "more", "agent": "fake"}), "invalid_command"),
        (
            json!({"text": "more", "model": "big-model"}),
            "invalid_command",
        ),
    ];
    for (body, code) in cases {
        let (status, resp) = d
            .post(
                &format!("/api/v1/conversations/{task}/messages"),
                body.clone(),
            )
            .await;
        assert_eq!(
            (status, resp["error"]["code"].as_str().unwrap()),
            (400, code),
            "{body}: {resp}"
        );
    }
}

/// The daemon's resident memory in KiB (Linux).
fn rss_kib(d: &Daemon) -> u64 {
    let pid = d.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn routing_locks_are_kept_for_no_unknown_and_no_idle_conversation() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let endpoints = ["messages", "new-session", "detach", "stop"];
    let hammer = |round: usize| {
        let d = &d;
        async move {
            for i in 0..250 {
                for ep in endpoints {
                    // Long ids, so that keeping them would show in the daemon's memory.
                    let id = format!("nope-{round}-{i}-{ep}-{}", "x".repeat(8192));
                    // (The other routes take no body.)
                    let body = match ep {
                        "messages" => json!({"text": "hi"}),
                        _ => json!({}),
                    };
                    let (status, body) = d
                        .post(&format!("/api/v1/conversations/{id}/{ep}"), body)
                        .await;
                    assert_eq!(status, 404, "{ep}: {body}");
                }
            }
        }
    };
    // A first round warms the allocator and the connection pool up.
    within("first round of unknown ids", hammer(0)).await;
    let before = rss_kib(&d);
    within("second round of unknown ids", hammer(1)).await;
    within("third round of unknown ids", hammer(2)).await;
    let after = rss_kib(&d);
    // 2 000 kept ids of 8 KiB would be ≥ 16 MiB.
    assert!(
        after < before + 6 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let figures = d.get_ok("/api/v1/runtime").await;
    assert_eq!(figures["routing_locks"], 0, "{figures}");

    // Conversations that were used and are idle again hold no lock either.
    for _ in 0..5 {
        let c = d.new_conversation(None).await;
        d.say_and_wait(&c, "hello").await;
        d.say(&c, "/status").await;
        d.post_ok(&format!("/api/v1/conversations/{c}/detach"), json!({}))
            .await;
    }
    let figures = d.get_ok("/api/v1/runtime").await;
    assert_eq!(figures["routing_locks"], 0, "{figures}");
}

#[tokio::test]
async fn an_approval_asked_after_the_conversation_left_the_session_fails_closed() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    // A turn queued in the old session runs after /new and asks for an approval there.
    let o1 = d.say(&c, "sleep 300").await;
    let o2 = d.say(&c, "approve late request").await;
    assert_eq!(o2["outcome"], "queued");
    d.say(&c, "/new").await;
    let t2 = wait_out(&d, &o2).await;
    assert!(
        t2["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: denied"),
        "{t2}"
    );
    wait_out(&d, &o1).await;
    let list = d.get_ok("/api/v1/approvals").await;
    let a = list
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == "late request")
        .unwrap();
    assert_eq!(a["status"], "cancelled", "{a}");
    let short = &a["id"].as_str().unwrap()[..8];
    assert!(
        statuses(&d, &c)
            .await
            .iter()
            .any(|s| s.starts_with(&format!("approval {short} (\"late request\") cancelled"))),
        "{:?}",
        statuses(&d, &c).await
    );
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound", "{conv}");
}
