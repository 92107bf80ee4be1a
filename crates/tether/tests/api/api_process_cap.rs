//! End to end (issue 15): `[pool] max_processes` is a hard cap on shared agent processes.
//! When every process is at its session limit and the cap is reached, a start evicts the
//! least recently used idle session (it goes dormant) and takes its slot; when another
//! agent's process holds the cap with idle sessions only, they are all evicted and that
//! process ends; with every session busy the start fails with `process_limit`, and the
//! cap is never exceeded. Fake agent, Codex and ACP dialects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::reliability_util;

use serde_json::Value;
use tether_testkit::{Daemon, DaemonOptions};

async fn daemon() -> Daemon {
    let state = tempfile::tempdir().unwrap().keep();
    let agents: String = ["codex", "acp"]
        .iter()
        .map(|d| reliability_util::agent_toml(&format!("{d}-shared"), d, &state, &[]))
        .collect();
    Daemon::start(DaemonOptions {
        extra_config: format!(
            "{agents}[pool]\nidle_ttl_secs = 0\nsessions_per_process = 2\nmax_processes = 1\n"
        ),
        ..Default::default()
    })
    .await
}

async fn pool(d: &Daemon) -> Value {
    d.get_ok("/api/v1/pool").await
}

/// (agent, pid, sessions) of every process.
async fn processes(d: &Daemon) -> Vec<(String, u64, Vec<String>)> {
    let pool = pool(d).await;
    pool["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["agent"].as_str().unwrap().to_owned(),
                p["pid"].as_u64().unwrap(),
                p["sessions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

async fn session_of(d: &Daemon, conv: &str) -> String {
    let c = d.get_ok(&format!("/api/v1/conversations/{conv}")).await;
    c["binding"]["session_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn at_the_process_cap_an_idle_session_makes_room_and_with_none_idle_the_start_fails() {
    let d = daemon().await;
    let a = d.new_conversation(Some("codex-shared")).await;
    let b = d.new_conversation(Some("codex-shared")).await;
    d.say_and_wait(&a, "alpha").await;
    d.say_and_wait(&b, "beta").await;
    let procs = processes(&d).await;
    assert_eq!(procs.len(), 1, "{procs:?}");
    let pid = procs[0].1;

    // Full: the least recently used idle session (a) is evicted for c.
    let c = d.new_conversation(Some("codex-shared")).await;
    let (oc, tc) = d.say_and_wait(&c, "gamma").await;
    assert_eq!(tc["status"], "completed", "{tc}");
    d.wait_conversation(&a, "a evicted", |c| c["binding"]["status"] == "dormant")
        .await;
    let procs = processes(&d).await;
    assert_eq!(procs.len(), 1, "the cap holds: {procs:?}");
    assert_eq!(procs[0].1, pid, "the same process: {procs:?}");
    let mut on = procs[0].2.clone();
    on.sort();
    let mut want = vec![
        session_of(&d, &b).await,
        oc["session_id"].as_str().unwrap().to_owned(),
    ];
    want.sort();
    assert_eq!(on, want);
    assert!(
        d.get_ok(&format!("/api/v1/conversations/{b}")).await["binding"]["status"] == "live",
        "b stays live"
    );

    // Every session busy: no room can be made, the start fails with its code.
    let ob = d.say(&b, "sleep 3000").await;
    let oc2 = d.say(&c, "sleep 3000").await;
    tether_testkit::within("both busy", async {
        while pool(&d).await["busy"] != 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let e = d.new_conversation(Some("codex-shared")).await;
    let oe = d.say(&e, "epsilon").await;
    let te = d
        .wait_turn(
            oe["session_id"].as_str().unwrap(),
            oe["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(te["status"], "failed", "{te}");
    assert_eq!(te["error_code"], "process_limit", "{te}");
    assert!(
        te["error_message"]
            .as_str()
            .unwrap()
            .contains("process cap (1)"),
        "{te}"
    );
    assert_eq!(processes(&d).await.len(), 1);
    for o in [&ob, &oc2] {
        let t = d
            .wait_turn(
                o["session_id"].as_str().unwrap(),
                o["turn_id"].as_str().unwrap(),
            )
            .await;
        assert_eq!(t["status"], "completed", "{t}");
    }

    // Another agent at the cap: the codex process's sessions are all idle, so they are
    // evicted and that process ends to make room for the ACP one.
    tether_testkit::within("both idle", async {
        while pool(&d).await["idle"] != 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let f = d.new_conversation(Some("acp-shared")).await;
    let (_, tf) = d.say_and_wait(&f, "zeta").await;
    assert_eq!(tf["status"], "completed", "{tf}");
    let procs = processes(&d).await;
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(procs[0].0, "acp-shared", "{procs:?}");
    for conv in [&b, &c] {
        d.wait_conversation(conv, "evicted for the other agent", |c| {
            c["binding"]["status"] == "dormant"
        })
        .await;
    }
    // The evicted session resumes strictly once room is made again.
    let (_, ta) = d.say_and_wait(&a, "alpha two").await;
    assert!(
        ta["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["alpha"]"#),
        "{ta}"
    );
}

/// Issue 24 S6: `[pool] process_limit` is one hard ceiling on agent processes of every
/// kind — a Claude session's own process and a process per session count like shared
/// ones. At it, the least recently used idle session is evicted to make room; with every
/// process busy a start fails with `process_limit`; the ceiling is never exceeded.
#[tokio::test]
async fn process_limit_caps_processes_of_every_kind() {
    let state = tempfile::tempdir().unwrap().keep();
    let agents: String = [("claude-own", "claude"), ("acp-own", "acp")]
        .iter()
        .map(|(name, dialect)| reliability_util::agent_toml(name, dialect, &state, &[]))
        .collect();
    let d = Daemon::start(DaemonOptions {
        extra_config: format!(
            "{agents}[pool]\nidle_ttl_secs = 0\nsessions_per_process = 1\nmax_live = 0\nprocess_limit = 2\n"
        ),
        ..Default::default()
    })
    .await;
    let agent_processes = async || pool(&d).await["agent_processes"].as_u64().unwrap();
    let a = d.new_conversation(Some("claude-own")).await;
    let b = d.new_conversation(Some("acp-own")).await;
    for c in [&a, &b] {
        let (_, t) = d.say_and_wait(c, "hello").await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    assert_eq!(agent_processes().await, 2);
    assert_eq!(pool(&d).await["process_limit"], 2);

    // A third session: the least recently used idle one (a's Claude process) makes room.
    let c = d.new_conversation(Some("acp-own")).await;
    let (_, t) = d.say_and_wait(&c, "hello").await;
    assert_eq!(t["status"], "completed", "{t}");
    let conv_a = d.get_ok(&format!("/api/v1/conversations/{a}")).await;
    assert_eq!(conv_a["binding"]["status"], "dormant", "{conv_a}");
    assert!(agent_processes().await <= 2);

    // Both processes busy: a start fails with process_limit, and nothing past the ceiling.
    let sb = d.say(&b, "hang").await;
    let sc = d.say(&c, "hang").await;
    for conv in [&b, &c] {
        d.wait_conversation(conv, "the turn runs", |v| v["state"] == "bound/running")
            .await;
    }
    let (_, ta) = d.say_and_wait(&a, "are you there?").await;
    assert_eq!(
        (ta["status"].as_str(), ta["error_code"].as_str()),
        (Some("failed"), Some("process_limit")),
        "{ta}"
    );
    assert!(
        ta["error_message"]
            .as_str()
            .unwrap_or_default()
            .contains("process_limit"),
        "{ta}"
    );
    assert_eq!(agent_processes().await, 2);
    // A turn ends: its session goes idle and a's resume takes its place.
    d.post_ok(
        &format!("/api/v1/conversations/{b}/stop"),
        serde_json::json!({}),
    )
    .await;
    d.wait_turn(
        sb["session_id"].as_str().unwrap(),
        sb["turn_id"].as_str().unwrap(),
    )
    .await;
    let (_, ta) = d.say_and_wait(&a, "again").await;
    assert_eq!(ta["status"], "completed", "{ta}");
    assert!(agent_processes().await <= 2);
    d.post_ok(
        &format!("/api/v1/conversations/{c}/stop"),
        serde_json::json!({}),
    )
    .await;
    d.wait_turn(
        sc["session_id"].as_str().unwrap(),
        sc["turn_id"].as_str().unwrap(),
    )
    .await;
}
