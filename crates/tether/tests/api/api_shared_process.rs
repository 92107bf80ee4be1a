//! End to end (issue 15): Codex and ACP sessions share one agent process. Two
//! conversations on one process each see only their own history, approvals and events; a
//! SIGKILL of the shared process ends each running turn once with its code and each
//! session resumes on its next message; a process takes sessions up to its limit; an
//! evicted session only detaches, and an empty process ends after its own idle time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::reliability_util;

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, within};

/// The two dialects whose processes are shared.
const SHARED: [&str; 2] = ["acp", "codex"];

async fn daemon(pool: &str) -> Daemon {
    let state = tempfile::tempdir().unwrap().keep();
    let agents: String = SHARED
        .iter()
        .map(|d| reliability_util::agent_toml(&format!("{d}-shared"), d, &state, &[]))
        .collect();
    Daemon::start(DaemonOptions {
        extra_config: format!("{agents}[pool]\n{pool}"),
        ..Default::default()
    })
    .await
}

/// The pool's processes of `agent`.
async fn processes(d: &Daemon, agent: &str) -> Vec<Value> {
    let pool = d.get_ok("/api/v1/pool").await;
    pool["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["agent"] == agent)
        .cloned()
        .collect()
}

fn session_ids(process: &Value) -> Vec<String> {
    process["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    within(what, async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn two_conversations_share_one_process_and_each_sees_only_its_own() {
    let d = daemon("idle_ttl_secs = 0\n").await;
    for dialect in SHARED {
        let agent = format!("{dialect}-shared");
        let a = d.new_conversation(Some(&agent)).await;
        let b = d.new_conversation(Some(&agent)).await;
        let (oa, _) = d.say_and_wait(&a, "alpha one").await;
        let (ob, _) = d.say_and_wait(&b, "beta one").await;
        let (sa, sb) = (
            oa["session_id"].as_str().unwrap(),
            ob["session_id"].as_str().unwrap(),
        );
        assert_ne!(sa, sb);
        let procs = processes(&d, &agent).await;
        assert_eq!(procs.len(), 1, "{agent}: one process for both: {procs:?}");
        let p = &procs[0];
        assert_eq!(p["shared"], true, "{p}");
        let mut both = vec![sa.to_owned(), sb.to_owned()];
        both.sort();
        assert_eq!(session_ids(p), both, "{p}");
        assert!(p["pid"].as_u64().is_some(), "{p}");
        assert!(p["rss_bytes"].as_u64().unwrap_or(0) > 0, "{p}");

        // Each session's history is its own.
        let (_, ta) = d.say_and_wait(&a, "alpha two").await;
        let (_, tb) = d.say_and_wait(&b, "beta two").await;
        let (ra, rb) = (
            ta["result_text"].as_str().unwrap(),
            tb["result_text"].as_str().unwrap(),
        );
        assert!(
            ra.contains(r#"remembers 1: ["alpha one"]"#),
            "{agent}: {ra}"
        );
        assert!(rb.contains(r#"remembers 1: ["beta one"]"#), "{agent}: {rb}");

        // Approvals at the same time: each conversation sees only its own, and each
        // decision reaches only its own turn.
        let oa = d.say(&a, "approve touch alpha").await;
        let ob = d.say(&b, "approve touch beta").await;
        let pa = d.pending_approval(&a).await;
        let pb = d.pending_approval(&b).await;
        // (Codex shows the command it runs: `echo touch alpha`.)
        assert!(
            pa["title"].as_str().unwrap().ends_with("touch alpha"),
            "{pa}"
        );
        assert!(
            pb["title"].as_str().unwrap().ends_with("touch beta"),
            "{pb}"
        );
        let pending = d.get_ok("/api/v1/approvals?status=pending").await;
        let of = |c: &str| {
            pending
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["conversation_id"] == c)
                .count()
        };
        assert_eq!((of(&a), of(&b)), (1, 1), "{pending}");
        let decide = |id: &Value, decision: &str| {
            (
                format!("/api/v1/approvals/{}", id.as_str().unwrap()),
                json!({ "decision": decision }),
            )
        };
        let (path, body) = decide(&pb["id"], "deny");
        d.post_ok(&path, body).await;
        let tb = d.wait_turn(sb, ob["turn_id"].as_str().unwrap()).await;
        let (path, body) = decide(&pa["id"], "allow");
        d.post_ok(&path, body).await;
        let ta = d.wait_turn(sa, oa["turn_id"].as_str().unwrap()).await;
        let (ra, rb) = (
            ta["result_text"].as_str().unwrap_or(""),
            tb["result_text"].as_str().unwrap_or(""),
        );
        assert!(ra.contains("approval: allowed"), "{agent}: {ta}");
        assert!(rb.contains("approval: denied"), "{agent}: {tb}");

        // No event of one session names the other's words.
        for (sid, own, other) in [(sa, "alpha", "beta"), (sb, "beta", "alpha")] {
            let events = reliability_util::session_events(&d, sid).await;
            let text = serde_json::to_string(&events).unwrap();
            assert!(text.contains(own), "{agent}");
            assert!(!text.contains(other), "{agent}: {sid} saw {other}: {text}");
        }
    }
}

#[tokio::test]
async fn sigkill_of_the_shared_process_mid_turn_ends_each_turn_once_and_each_resumes() {
    let d = daemon("idle_ttl_secs = 0\n").await;
    for dialect in SHARED {
        let agent = format!("{dialect}-shared");
        let a = d.new_conversation(Some(&agent)).await;
        let b = d.new_conversation(Some(&agent)).await;
        d.say_and_wait(&a, "alpha one").await;
        d.say_and_wait(&b, "beta one").await;
        let oa = d.say(&a, "sleep 60000").await;
        let ob = d.say(&b, "sleep 60000").await;
        for c in [&a, &b] {
            d.wait_conversation(c, "turn running", |v| v["state"] == "bound/running")
                .await;
        }
        let procs = processes(&d, &agent).await;
        assert_eq!(procs.len(), 1, "{procs:?}");
        let pid = procs[0]["pid"].as_u64().unwrap();
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        for (c, o) in [(&a, &oa), (&b, &ob)] {
            let sid = o["session_id"].as_str().unwrap();
            let tid = o["turn_id"].as_str().unwrap();
            let t = d.wait_turn(sid, tid).await;
            assert_eq!(t["status"], "failed", "{agent}: {t}");
            assert_eq!(t["error_code"], "agent_crashed", "{agent}: {t}");
            let ends = reliability_util::terminal_events(&d, sid, tid).await;
            assert_eq!(ends.len(), 1, "{agent}: one terminal event: {ends:?}");
            d.wait_conversation(c, "dormant after the crash", |v| {
                v["binding"]["status"] == "dormant"
            })
            .await;
        }
        // Each resumes strictly, with its own history, on a new process.
        for (c, o, own, other) in [
            (&a, &oa, "alpha one", "beta"),
            (&b, &ob, "beta one", "alpha"),
        ] {
            let (o2, t2) = d.say_and_wait(c, "again").await;
            assert_eq!(o2["session_id"], o["session_id"], "{agent}");
            assert_eq!(t2["status"], "completed", "{agent}: {t2}");
            let text = t2["result_text"].as_str().unwrap();
            assert!(text.contains(own), "{agent}: {text}");
            assert!(!text.contains(other), "{agent}: {text}");
        }
        let procs = processes(&d, &agent).await;
        assert_eq!(
            procs.len(),
            1,
            "{agent}: both resumed on one new process: {procs:?}"
        );
        assert_ne!(procs[0]["pid"].as_u64(), Some(pid));
    }
}

#[tokio::test]
async fn a_process_hosts_sessions_up_to_its_limit() {
    let d = daemon("idle_ttl_secs = 0\nsessions_per_process = 2\n").await;
    for dialect in SHARED {
        let agent = format!("{dialect}-shared");
        for word in ["one", "two", "three"] {
            let c = d.new_conversation(Some(&agent)).await;
            d.say_and_wait(&c, word).await;
        }
        let procs = processes(&d, &agent).await;
        let mut sizes: Vec<usize> = procs.iter().map(|p| session_ids(p).len()).collect();
        sizes.sort();
        assert_eq!(sizes, vec![1, 2], "{agent}: {procs:?}");
    }
    let pool = d.get_ok("/api/v1/pool").await;
    assert_eq!(pool["sessions_per_process"], 2, "{pool}");
    assert_eq!(pool["live"], 6, "{pool}");
    assert_eq!(pool["process_count"], 4, "{pool}");
    let status = d.say(&d.new_conversation(None).await, "/status").await;
    assert!(
        status["reply"]
            .as_str()
            .unwrap()
            .contains("4 agent processes"),
        "{status}"
    );
    let out = d.cli(&["doctor"]).await;
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("4 agent processes"), "{report}");
    for dialect in SHARED {
        let lines: Vec<&str> = report
            .lines()
            .filter(|l| {
                l.trim_start()
                    .starts_with(&format!("{dialect}-shared pid "))
            })
            .collect();
        assert_eq!(lines.len(), 2, "{report}");
        assert!(
            lines
                .iter()
                .all(|l| l.contains("(shared)") && l.contains(" MB")),
            "{report}"
        );
        assert!(lines.iter().any(|l| l.contains(": 2 sessions")), "{report}");
    }
}

#[tokio::test]
async fn eviction_detaches_a_session_and_an_empty_process_ends_after_its_idle_time() {
    let d = daemon("idle_ttl_secs = 1\nprocess_idle_secs = 4\n").await;
    for dialect in SHARED {
        let agent = format!("{dialect}-shared");
        let a = d.new_conversation(Some(&agent)).await;
        let b = d.new_conversation(Some(&agent)).await;
        d.say_and_wait(&a, "alpha one").await;
        d.say_and_wait(&b, "beta one").await;
        let pid = processes(&d, &agent).await[0]["pid"].as_u64().unwrap();
        for c in [&a, &b] {
            d.wait_conversation(c, "evicted after the TTL", |v| {
                v["binding"]["status"] == "dormant"
            })
            .await;
        }
        // Both left; the process stays for its idle time, and a follow-up resumes on it.
        let procs = processes(&d, &agent).await;
        assert_eq!(procs.len(), 1, "{agent}: {procs:?}");
        assert_eq!(procs[0]["pid"].as_u64(), Some(pid));
        assert!(session_ids(&procs[0]).is_empty(), "{procs:?}");
        let (_, t) = d.say_and_wait(&a, "alpha two").await;
        assert!(
            t["result_text"]
                .as_str()
                .unwrap()
                .contains(r#"remembers 1: ["alpha one"]"#),
            "{agent}: {t}"
        );
        assert_eq!(processes(&d, &agent).await[0]["pid"].as_u64(), Some(pid));
        // Evicted again, then the empty process ends.
        eventually("the empty process ends", async || {
            (processes(&d, &agent).await.is_empty() && !running(pid)).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn a_resumed_session_goes_back_to_the_process_it_left() {
    // Codex keeps an unsubscribed thread's writer, so a thread can only be resumed where
    // it was while that process runs.
    let d = daemon("idle_ttl_secs = 1\nsessions_per_process = 2\nprocess_idle_secs = 15\n").await;
    for dialect in SHARED {
        let agent = format!("{dialect}-shared");
        let mut convs = Vec::new();
        for word in ["one", "two", "three"] {
            let c = d.new_conversation(Some(&agent)).await;
            let (o, _) = d.say_and_wait(&c, word).await;
            convs.push((c, o["session_id"].as_str().unwrap().to_owned()));
        }
        let pid_of = |procs: &[Value], sid: &str| {
            procs
                .iter()
                .find(|p| session_ids(p).iter().any(|s| s == sid))
                .and_then(|p| p["pid"].as_u64())
        };
        let procs = processes(&d, &agent).await;
        let third = pid_of(&procs, &convs[2].1).unwrap();
        assert_ne!(pid_of(&procs, &convs[0].1), Some(third), "{procs:?}");
        for (c, _) in &convs {
            d.wait_conversation(c, "evicted after the TTL", |v| {
                v["binding"]["status"] == "dormant"
            })
            .await;
        }
        // Both processes are empty now; the third session resumes first, on its own.
        let (_, t) = d.say_and_wait(&convs[2].0, "again").await;
        assert_eq!(t["status"], "completed", "{t}");
        let procs = processes(&d, &agent).await;
        assert_eq!(
            pid_of(&procs, &convs[2].1),
            Some(third),
            "{agent}: {procs:?}"
        );
    }
}

/// Issue 24 S5: on a shared process, a message naming a session id nobody holds (here a
/// notification and a permission request for `foreign-1`, sent by another conversation's
/// turn) never reaches another session: a strictly resumed session's running turn goes
/// on and completes, and shows nothing of it.
#[tokio::test]
async fn a_foreign_session_id_never_ends_another_sessions_turn() {
    let mut d = daemon("idle_ttl_secs = 0\n").await;
    let dir = tempfile::tempdir().unwrap();
    let mut firsts = Vec::new();
    for dialect in SHARED {
        let agent = format!("{dialect}-shared");
        let a = d.new_conversation(Some(&agent)).await;
        let (oa, _) = d.say_and_wait(&a, "hello").await;
        firsts.push((
            dialect,
            agent,
            a,
            oa["session_id"].as_str().unwrap().to_owned(),
        ));
    }
    // After a restart each first conversation is strictly resumed on its next message.
    d.restart().await;
    for (dialect, agent, a, sid) in firsts {
        let lines = match dialect {
            "acp" => [
                r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"foreign-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"FOREIGN"}}}}"#,
                r#"{"jsonrpc":"2.0","id":"foreign-req","method":"session/request_permission","params":{"sessionId":"foreign-1","toolCall":{"toolCallId":"x","title":"FOREIGN"},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]}}"#,
            ],
            _ => [
                r#"{"method":"item/agentMessage/delta","params":{"threadId":"foreign-1","turnId":"x","itemId":"y","delta":"FOREIGN"}}"#,
                r#"{"id":"foreign-req","method":"item/commandExecution/requestApproval","params":{"threadId":"foreign-1","turnId":"x","itemId":"y","command":"FOREIGN"}}"#,
            ],
        };
        let file = dir.path().join(format!("{dialect}.jsonl"));
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();

        let out = d.say(&a, "sleep 2500").await;
        assert_eq!(out["session_id"], sid.as_str(), "{out}");
        let turn_a = out["turn_id"].as_str().unwrap().to_owned();
        d.wait_conversation(&a, "the resumed turn runs", |v| {
            v["state"] == "bound/running"
        })
        .await;
        // The resumed session holds its process before the other one starts on it.
        eventually("the resumed session is on a process", async || {
            let procs = processes(&d, &agent).await;
            procs
                .iter()
                .any(|p| session_ids(p).contains(&sid))
                .then_some(())
        })
        .await;
        let b = d.new_conversation(Some(&agent)).await;
        let (_, tb) = d
            .say_and_wait(&b, &format!("replay {}", file.display()))
            .await;
        assert_eq!(tb["status"], "completed", "{dialect}: {tb}");
        let procs = processes(&d, &agent).await;
        assert_eq!(procs.len(), 1, "{dialect}: one shared process: {procs:?}");
        let ta = d.wait_turn(&sid, &turn_a).await;
        assert_eq!(ta["status"], "completed", "{dialect}: {ta}");
        let events = d
            .get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
            .await;
        let text = events.to_string();
        assert!(text.contains("slept 2500"), "{dialect}: {text}");
        assert!(!text.contains("FOREIGN"), "{dialect}: {text}");
        let pending = d.get_ok("/api/v1/approvals").await;
        assert!(
            !pending.to_string().contains("FOREIGN"),
            "{dialect}: {pending}"
        );
    }
}

/// Issue 26 item 5: one agent session id, one session. An agent that answers a second
/// `session/new` with an id another session holds is refused with `protocol_error`
/// naming it — on a shared process (the first session's route is not taken over: it goes
/// on) and on processes of their own (the store holds the id already).
#[tokio::test]
async fn an_agent_session_id_held_by_another_session_is_refused() {
    for pool in [
        "idle_ttl_secs = 0\n",
        "idle_ttl_secs = 0\nsessions_per_process = 1\n",
    ] {
        let state = tempfile::tempdir().unwrap().keep();
        let agent =
            reliability_util::agent_toml("acp-dup", "acp", &state, &["--session-id", "dup-1"]);
        let d = Daemon::start(DaemonOptions {
            extra_config: format!("{agent}[pool]\n{pool}"),
            ..Default::default()
        })
        .await;
        let a = d.new_conversation(Some("acp-dup")).await;
        let (oa, ta) = d.say_and_wait(&a, "hello").await;
        assert_eq!(ta["status"], "completed", "{pool}: {ta}");
        let b = d.new_conversation(Some("acp-dup")).await;
        let (_, tb) = d.say_and_wait(&b, "hello").await;
        assert_eq!(
            (tb["status"].as_str(), tb["error_code"].as_str()),
            (Some("failed"), Some("protocol_error")),
            "{pool}: {tb}"
        );
        let message = tb["error_message"].as_str().unwrap_or_default();
        assert!(
            message.contains("dup-1")
                && (message.contains("another session") || message.contains("already holds")),
            "{message}"
        );
        // The first session goes on in its own session.
        let (o2, t2) = d.say_and_wait(&a, "again").await;
        assert_eq!(t2["status"], "completed", "{pool}: {t2}");
        assert_eq!(o2["session_id"], oa["session_id"]);
        let text = d
            .get_ok(&format!(
                "/api/v1/sessions/{}/events?limit=1000",
                oa["session_id"].as_str().unwrap()
            ))
            .await
            .to_string();
        assert!(text.contains("echo: again"), "{text}");
    }
}
