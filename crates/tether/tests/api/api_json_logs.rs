//! End to end: JSON logs (issue 31): one JSON object per line, and the lines logged
//! within a turn name its trace id (also without a collector).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use tether_testkit::{Daemon, DaemonOptions};

#[tokio::test]
async fn json_logs_are_json_and_carry_the_turns_trace_id() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[telemetry]\nlog_format = \"json\"\n".to_owned(),
        capture_stderr: true,
        log_filter: "info,tether_runtime=debug".to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    d.say_and_wait(&c, "hello").await;
    let log = d.stderr_log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() > 3, "{log}");
    let in_turn: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["spans"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == "tether.turn"))
        })
        .collect();
    assert!(!in_turn.is_empty(), "no line within a turn: {log}");
    for l in in_turn {
        let turn = l["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "tether.turn")
            .unwrap();
        let id = turn["trace_id"].as_str().unwrap_or_default();
        assert_eq!(id.len(), 32, "a trace id: {l}");
    }
}
