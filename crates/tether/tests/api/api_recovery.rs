//! End to end: SIGKILL and restart, agent crashes, strict resume.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use tether_testkit::{Daemon, DaemonOptions, within};

async fn turn(d: &Daemon, sid: &str, tid: &str) -> Value {
    let turns = d.all_turns(sid).await;
    turns
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == tid)
        .unwrap()
        .clone()
}

#[tokio::test]
async fn sigkill_mid_turn_and_mid_approval_then_the_next_message_continues_the_session() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    // Conversation A: killed mid-turn.
    let a = d.new_conversation(None).await;
    let (oa, _) = d.say_and_wait(&a, "remember apples").await;
    let sa = oa["session_id"].as_str().unwrap().to_string();
    let oa2 = d.say(&a, "stream 100 100").await;
    d.wait_conversation(&a, "turn running", |c| c["state"] == "bound/running")
        .await;
    // The agent has the prompt (it streams): `running` is stored before the prompt goes
    // out, and the agent is to remember it after the restart.
    let streaming = oa2["turn_id"].as_str().unwrap().to_string();
    tether_testkit::within("the agent streams", async {
        loop {
            let page = d
                .get_ok(&format!("/api/v1/sessions/{sa}/events?limit=1000"))
                .await;
            let seen = page["events"].as_array().into_iter().flatten().any(|e| {
                e["turn_id"] == streaming.as_str() && e["payload"]["type"] == "message_delta"
            });
            if seen {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    // Conversation B: killed while an approval waits.
    let b = d.new_conversation(None).await;
    let ob = d.say(&b, "approve dangerous").await;
    let sb = ob["session_id"].as_str().unwrap().to_string();
    d.wait_conversation(&b, "approval pending", |c| {
        c["state"] == "bound/waiting_approval"
    })
    .await;
    let approval_id = d.get_ok(&format!("/api/v1/conversations/{b}")).await["pending_approvals"][0]
        .as_str()
        .unwrap()
        .to_string();

    d.restart().await;

    let t = turn(&d, &sa, oa2["turn_id"].as_str().unwrap()).await;
    assert_eq!(t["status"], "interrupted");
    let tb = turn(&d, &sb, ob["turn_id"].as_str().unwrap()).await;
    assert_eq!(tb["status"], "interrupted");
    let approvals = d.get_ok("/api/v1/approvals").await;
    let ap = approvals
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == approval_id.as_str())
        .unwrap();
    assert_eq!(ap["status"], "expired");
    let ca = d.get_ok(&format!("/api/v1/conversations/{a}")).await;
    assert_eq!(ca["binding"]["session_id"], sa.as_str());
    assert_eq!(ca["binding"]["status"], "dormant");
    assert_eq!(ca["state"], "bound/idle");
    let cb = d.get_ok(&format!("/api/v1/conversations/{b}")).await;
    assert_eq!(cb["binding"]["session_id"], sb.as_str());
    // One restart notice per affected conversation.
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{a}/messages"))
        .await;
    let notices = hist
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "status" && m["text"].as_str().unwrap().contains("restarted"))
        .count();
    assert_eq!(notices, 1, "{hist}");
    // An answer to the expired approval is refused.
    let (status, body) = d
        .post(
            &format!("/api/v1/approvals/{approval_id}"),
            serde_json::json!({"decision":"allow"}),
        )
        .await;
    assert_eq!(status, 409, "{body}");

    // The next message resumes the same agent session, history remembered.
    let (o, t) = d.say_and_wait(&a, "after restart").await;
    assert_eq!(o["session_id"], sa.as_str());
    assert!(o["new_session"].is_null());
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        t["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["remember apples","stream 100 100"]"#),
        "{t}"
    );
    let (o, t) = d.say_and_wait(&b, "after restart too").await;
    assert_eq!(o["session_id"], sb.as_str());
    assert!(
        t["result_text"].as_str().unwrap().contains("remembers 1:"),
        "{t}"
    );
}

#[tokio::test]
async fn an_agent_crash_fails_the_turn_with_its_stderr_and_the_next_message_resumes() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let (o1, _) = d.say_and_wait(&c, "before crash").await;
    let sid = o1["session_id"].as_str().unwrap().to_string();
    let (o2, t2) = d.say_and_wait(&c, "crash").await;
    assert_eq!(o2["session_id"], sid.as_str());
    assert_eq!(t2["status"], "failed");
    assert_eq!(t2["error_code"], "agent_crashed");
    assert!(
        t2["error_message"]
            .as_str()
            .unwrap()
            .contains("crashing as asked"),
        "{t2}"
    );
    let (o3, t3) = d.say_and_wait(&c, "after crash").await;
    assert_eq!(o3["session_id"], sid.as_str());
    assert_eq!(t3["status"], "completed", "{t3}");
    assert!(
        t3["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 2: ["before crash","crash"]"#),
        "{t3}"
    );
}

#[tokio::test]
async fn a_session_that_cannot_be_loaded_gives_resume_unavailable_and_stays_bound() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    // Lost agent state: unknown id on resume.
    let c = d.new_conversation(None).await;
    let (o1, _) = d.say_and_wait(&c, "hello").await;
    let sid = o1["session_id"].as_str().unwrap().to_string();
    // Agents that refuse resume or come back with another id.
    let r = d.new_conversation(Some("fake-refuse")).await;
    let (or, _) = d.say_and_wait(&r, "hello").await;
    let o = d.new_conversation(Some("fake-other")).await;
    let (oo, _) = d.say_and_wait(&o, "hello").await;

    d.restart().await;
    let external = d.get_ok(&format!("/api/v1/sessions/{sid}")).await["external_id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::remove_file(d.fake_state_dir().join(format!("{external}.json"))).unwrap();

    for (conv, out) in [(&c, &o1), (&r, &or), (&o, &oo)] {
        let (o2, t2) = d.say_and_wait(conv, "are you there?").await;
        assert_eq!(o2["session_id"], out["session_id"], "no silent new session");
        assert_eq!(t2["status"], "failed", "{t2}");
        assert_eq!(t2["error_code"], "resume_unavailable", "{t2}");
        if conv == &c {
            // The agent said only "Internal error", its reason in the error's data: the
            // person sees the reason (issue 24, first use 1).
            let message = t2["error_message"].as_str().unwrap_or_default();
            assert!(message.contains("session not found"), "{t2}");
        }
        let cv = d.get_ok(&format!("/api/v1/conversations/{conv}")).await;
        assert_eq!(
            cv["binding"]["session_id"], out["session_id"],
            "binding stays"
        );
        // Nothing was prompted: the turn has no agent output.
        let events = d
            .get_ok(&format!(
                "/api/v1/sessions/{}/events?limit=1000",
                out["session_id"].as_str().unwrap()
            ))
            .await;
        let deltas_after = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["turn_id"] == t2["id"] && e["payload"]["type"] == "message_delta")
            .count();
        assert_eq!(deltas_after, 0);
    }
    // /new recovers.
    let o = within("new", d.say(&c, "/new start over")).await;
    assert_eq!(o["new_session"], "explicit");
    let t = d
        .wait_turn(
            o["session_id"].as_str().unwrap(),
            o["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(t["status"], "completed");
}

/// Uploads one text file to conversation `c`; its attachment id, in a list.
async fn upload_text(d: &Daemon, c: &str, name: &str, bytes: &[u8]) -> Vec<String> {
    let part = tether_testkit::uploads::Part {
        name,
        content_type: Some("text/plain"),
        bytes,
    };
    d.upload_ok(c, &[part]).await
}

/// Runs one statement on the daemon's store (stopped), on whichever backend it has.
async fn exec_on_store(d: &Daemon, sql: &str, bind: &str) {
    use sqlx::Connection;
    match d.database_url() {
        Some(url) => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(sql).bind(bind).execute(&mut c).await.unwrap();
        }
        None => {
            let url = format!("sqlite://{}", d.db_path().display());
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query(sql).bind(bind).execute(&mut c).await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_file_claimed_by_a_message_a_crash_cut_off_goes_with_the_message_sent_again() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let ids = upload_text(&d, &c, "notes.txt", b"the notes\n").await;
    // The message claimed the file for its turn's id, then tether died before the turn
    // was stored (the client got no answer).
    d.kill9().await;
    within(
        "the claim is written",
        exec_on_store(
            &d,
            "UPDATE attachments SET turn_id = 'turn-never-stored' WHERE id = $1",
            &ids[0],
        ),
    )
    .await;
    d.restart().await;
    let body = serde_json::json!({"text": "read the notes", "attachments": ids});
    let (status, out) = d
        .post(&format!("/api/v1/conversations/{c}/messages"), body.clone())
        .await;
    assert_eq!(status, 200, "the message sent again is taken: {out}");
    let t = d
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(t["status"], "completed", "{t}");
    let reply = t["result_text"].as_str().unwrap();
    assert!(
        reply.contains("-notes.txt"),
        "the agent got the file: {reply}"
    );
    // Sent now: a third message cannot take it again.
    let (status, out) = d
        .post(&format!("/api/v1/conversations/{c}/messages"), body)
        .await;
    assert_eq!(status, 400, "{out}");
    assert_eq!(out["error"]["code"], "bad_request", "{out}");
}

#[tokio::test]
async fn a_file_of_a_message_refused_for_a_full_queue_goes_with_the_message_sent_again() {
    let d = Daemon::start(DaemonOptions {
        queue_cap: 1,
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let ids = upload_text(&d, &c, "plan.txt", b"the plan\n").await;
    let running = d.say(&c, "sleep 1500").await;
    let queued = d.say(&c, "after the sleep").await;
    assert_eq!(queued["outcome"], "queued", "{queued}");
    let body = serde_json::json!({"text": "read the plan", "attachments": ids});
    let url = format!("/api/v1/conversations/{c}/messages");
    let (status, out) = d.post(&url, body.clone()).await;
    assert_eq!(status, 429, "{out}");
    assert_eq!(out["error"]["code"], "queue_full", "{out}");
    let session = running["session_id"].as_str().unwrap();
    d.wait_turn(session, queued["turn_id"].as_str().unwrap())
        .await;
    // The refused message never ran: its file is not sent, and goes with the retry.
    let (status, out) = d.post(&url, body).await;
    assert_eq!(status, 200, "{out}");
    let t = d.wait_turn(session, out["turn_id"].as_str().unwrap()).await;
    assert_eq!(t["status"], "completed", "{t}");
    let reply = t["result_text"].as_str().unwrap();
    assert!(
        reply.contains("-plan.txt"),
        "the agent got the file: {reply}"
    );
}
