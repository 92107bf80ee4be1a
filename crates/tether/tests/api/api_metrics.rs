//! End to end: the Prometheus endpoint (issue 31). Admins read it on the API port, the
//! scraper without a token on `[telemetry] metrics_listen`; turns, approvals, resumes
//! and the store's commits show in their series; every series is documented in the
//! README.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::json;
use tether_testkit::{Daemon, DaemonOptions, within};

/// The value of the first sample whose line starts with `prefix` (name and labels).
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn scrape(d: &Daemon) -> String {
    let r = within(
        "scrape",
        d.client.get(d.url("/metrics")).bearer_auth(&d.token).send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test]
async fn metrics_count_turns_approvals_resumes_and_commits() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut d = Daemon::start(DaemonOptions {
        extra_config: format!("[telemetry]\nmetrics_listen = \"127.0.0.1:{port}\"\n"),
        ..DaemonOptions::default()
    })
    .await;
    // No token, no metrics on the API port.
    let r = d.client.get(d.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401);

    let c = d.new_conversation(None).await;
    d.say_and_wait(&c, "hello").await;
    let o = d.say(&c, "approve deploy").await;
    let a = d.pending_approval(&c).await;
    d.post_ok(
        &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
        json!({"decision": "allow"}),
    )
    .await;
    d.wait_turn(
        o["session_id"].as_str().unwrap(),
        o["turn_id"].as_str().unwrap(),
    )
    .await;

    let text = scrape(&d).await;
    let turns = sample(
        &text,
        "tether_turns_total",
        &["agent=\"fake\"", "outcome=\"completed\""],
    );
    assert_eq!(turns, Some(2.0), "{text}");
    assert_eq!(
        sample(
            &text,
            "tether_turn_duration_seconds_count",
            &["agent=\"fake\""]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "tether_turn_own_seconds_count", &["agent=\"fake\""]),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "tether_approval_wait_seconds_count",
            &["kind=\"approval\""]
        ),
        Some(1.0)
    );
    assert!(sample(&text, "tether_store_commit_seconds_count", &[]).unwrap_or(0.0) >= 1.0);
    assert_eq!(sample(&text, "tether_ready", &[]), Some(1.0));
    assert_eq!(sample(&text, "tether_draining", &[]), Some(0.0));
    assert_eq!(
        sample(&text, "tether_live_sessions", &["state=\"idle\""]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "tether_sessions", &["status=\"live\""]),
        Some(1.0)
    );
    assert_eq!(sample(&text, "tether_approvals_pending", &[]), Some(0.0));
    assert!(
        text.contains("node=\""),
        "every series names its node: {text}"
    );

    // A restart, then a message: the session is resumed, counted as such.
    d.restart().await;
    d.say_and_wait(&c, "again").await;
    let text = scrape(&d).await;
    assert_eq!(
        sample(&text, "tether_resumes_total", &["outcome=\"ok\""]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "tether_sessions", &["status=\"live\""]),
        Some(1.0)
    );

    // The scraper's port needs no token and serves the same series.
    let apart = within(
        "scrape apart",
        reqwest::get(format!("http://127.0.0.1:{port}/metrics")),
    )
    .await
    .unwrap();
    assert_eq!(apart.status(), 200);
    let apart = apart.text().await.unwrap();
    assert!(apart.contains("tether_resumes_total"), "{apart}");

    // Every series is documented in the README ("Operating tether").
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let described: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(described.len() >= 20, "{described:?}");
    let missing: Vec<&&str> = described
        .iter()
        .filter(|n| !readme.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "series missing in the README: {missing:?}"
    );
}
