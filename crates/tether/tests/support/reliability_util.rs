//! Helpers shared by the reliability tests: fake-agent variants per dialect, terminal
//! events of a turn, the daemon's health, and what `/proc` says about its process.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tether_testkit::{Daemon, bin_path, within};

/// The three dialects the fake agent speaks, with the driver tether runs it with.
pub const DIALECTS: [&str; 3] = ["acp", "codex", "claude"];

/// `[agents.<name>]` running the fake agent in `dialect` with extra flags.
pub fn agent_toml(name: &str, dialect: &str, state: &Path, flags: &[&str]) -> String {
    let mut args = vec![
        "--dialect".to_string(),
        dialect.to_string(),
        "--state-dir".to_string(),
        state.display().to_string(),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[agents.{name}]\ndriver = \"{dialect}\"\ncommand = {:?}\nargs = [{}]\n\n",
        bin_path("fake-agent").display().to_string(),
        args.join(", ")
    )
}

/// One agent per dialect named `<dialect><suffix>` (e.g. `codex-exit`) with `flags`.
pub fn agents_per_dialect(suffix: &str, state: &Path, flags: &[&str]) -> String {
    DIALECTS
        .iter()
        .map(|d| agent_toml(&format!("{d}{suffix}"), d, state, flags))
        .collect()
}

/// Every event of a session (up to 1000).
pub async fn session_events(d: &Daemon, sid: &str) -> Vec<Value> {
    // Every page (a soak's sessions hold many thousands of events).
    let mut all: Vec<Value> = Vec::new();
    loop {
        let after = all.last().and_then(|e| e["seq"].as_i64()).unwrap_or(0);
        let page = d
            .get_ok(&format!(
                "/api/v1/sessions/{sid}/events?after_seq={after}&limit=1000"
            ))
            .await;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        let full = events.len() == 1000;
        all.extend(events);
        if !full {
            return all;
        }
    }
}

/// The turn-ending events (`turn_completed|failed|cancelled|interrupted`) of a turn.
pub async fn terminal_events(d: &Daemon, sid: &str, tid: &str) -> Vec<Value> {
    session_events(d, sid)
        .await
        .into_iter()
        .filter(|e| e["turn_id"] == tid)
        .filter(|e| {
            matches!(
                e["payload"]["type"].as_str().unwrap_or(""),
                "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted"
            )
        })
        .collect()
}

/// Sends `text`, waits for the turn to end and checks it ended with exactly one terminal
/// event; returns (outcome, turn).
pub async fn turn_once(d: &Daemon, conv: &str, text: &str) -> (Value, Value) {
    let (out, turn) = d.say_and_wait(conv, text).await;
    let sid = out["session_id"].as_str().unwrap_or_default().to_string();
    let tid = out["turn_id"].as_str().unwrap_or_default().to_string();
    // The terminal event is written with the turn's end; allow the commit to show.
    let ends = within("the terminal event is stored", async {
        loop {
            let ends = terminal_events(d, &sid, &tid).await;
            if !ends.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return terminal_events(d, &sid, &tid).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        ends.len(),
        1,
        "exactly one terminal event for {text:?}: {ends:?}"
    );
    let kind = ends[0]["payload"]["type"].as_str().unwrap_or_default();
    let expected = match turn["status"].as_str().unwrap_or_default() {
        "completed" => "turn_completed",
        "failed" => "turn_failed",
        "cancelled" => "turn_cancelled",
        _ => "turn_interrupted",
    };
    assert_eq!(kind, expected, "terminal event matches the turn: {turn}");
    if kind == "turn_failed" {
        assert_eq!(
            ends[0]["payload"]["code"], turn["error_code"],
            "the event carries the turn's code"
        );
    }
    (out, turn)
}

/// The daemon answers health, and a new conversation on `agent` completes a turn.
pub async fn assert_healthy(d: &Daemon, agent: &str) {
    let resp = within("health", d.client.get(d.url("/api/v1/health")).send())
        .await
        .unwrap_or_else(|e| panic!("health: {e}"));
    assert_eq!(resp.status().as_u16(), 200, "health");
    let c = d.new_conversation(Some(agent)).await;
    let (_, t) = turn_once(d, &c, "still alive?").await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        t["result_text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("echo: still alive?"),
        "{t}"
    );
}

/// A field of `/proc/<pid>/status` (e.g. `Threads`, `VmRSS` in kB).
pub fn proc_status(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of a process.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Direct child processes of a process that are still running (not zombies).
pub fn live_children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{c}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("X");
            if state != "Z" && state != "X" && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// Polls `f` every 50 ms until it returns `Some` (bounded by the testkit timeout).
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
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
