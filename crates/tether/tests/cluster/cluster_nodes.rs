//! End to end: the node registry (issue 12). Two `tether serve` on one PostgreSQL
//! database register as two nodes with leases; each lists both in `GET /api/v1/cluster`
//! (itself marked), a SIGKILLed node is gone once its lease runs out while the other
//! keeps renewing, and `tether doctor` shows the nodes. A lone daemon (SQLite by default)
//! is the only node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use tether_testkit::postgres::TestDatabase;
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

fn options(url: &str) -> DaemonOptions {
    DaemonOptions {
        env: vec![("TETHER_DATABASE_URL".to_string(), url.to_string())],
        ..crate::common::node_options(2)
    }
}

fn nodes(view: &Value) -> Vec<Value> {
    view["nodes"].as_array().unwrap().clone()
}

/// Polls `GET /api/v1/cluster` on `d` until `done` holds (or the test's limit).
async fn wait_cluster(d: &Daemon, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    within(what, async {
        loop {
            let view = d.get_ok("/api/v1/cluster").await;
            if done(&view) {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

#[tokio::test]
async fn nodes_on_one_database_see_each_other_and_a_killed_one_goes_when_its_lease_ends() {
    let db = tokio::time::timeout(Duration::from_secs(120), TestDatabase::create())
        .await
        .expect("timed out creating a test database")
        .unwrap();
    let a = Daemon::start(options(&db.url)).await;
    let mut b = Daemon::start(options(&db.url)).await;

    let both_up = |v: &Value| {
        let n = nodes(v);
        n.len() == 2 && n.iter().all(|n| n["alive"] == true)
    };
    let from_a = wait_cluster(&a, "a sees both nodes", both_up).await;
    let from_b = wait_cluster(&b, "b sees both nodes", both_up).await;
    assert_eq!(from_a["store"], "postgres");
    assert_eq!(from_a["lease_ttl_ms"], 2000);
    let a_id = from_a["node_id"].as_str().unwrap().to_string();
    let b_id = from_b["node_id"].as_str().unwrap().to_string();
    assert_ne!(a_id, b_id);
    for (view, me) in [(&from_a, &a_id), (&from_b, &b_id)] {
        for n in nodes(view) {
            assert_eq!(n["this_node"], n["id"] == me.as_str(), "{view}");
            assert!(n["addr"].as_str().unwrap().starts_with("127.0.0.1:"));
        }
    }

    // b dies without a goodbye: a sees its lease run out, and keeps its own.
    b.kill9().await;
    let after = wait_cluster(&a, "b's lease runs out", |v| {
        nodes(v)
            .iter()
            .any(|n| n["id"] == b_id.as_str() && n["alive"] == false)
    })
    .await;
    let mine = nodes(&after)
        .into_iter()
        .find(|n| n["id"] == a_id.as_str())
        .unwrap();
    assert_eq!(mine["alive"], true, "{after}");
    // Still alive more than a lease later: a renews.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = a.get_ok("/api/v1/cluster").await;
    let mine = nodes(&later)
        .into_iter()
        .find(|n| n["id"] == a_id.as_str())
        .unwrap();
    assert_eq!(mine["alive"], true, "{later}");

    // doctor lists the nodes the running daemon sees.
    let out = within(
        "tether doctor",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(a.home.path().join("tether.toml"))
            .arg("doctor")
            .env("TETHER_DATABASE_URL", &db.url)
            .env_remove("TETHER_HOME")
            .output(),
    )
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("cluster (postgres store"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.contains(&a_id) && l.contains("up") && l.contains("(this daemon)")),
        "{report}"
    );
    assert!(
        report
            .lines()
            .any(|l| l.contains(&b_id) && l.contains("gone")),
        "{report}"
    );
}

#[tokio::test]
async fn a_lone_daemon_is_the_only_node() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let view = d.get_ok("/api/v1/cluster").await;
    let n = nodes(&view);
    assert_eq!(n.len(), 1, "{view}");
    assert_eq!(n[0]["this_node"], true);
    assert_eq!(n[0]["alive"], true);
    assert_eq!(n[0]["id"], view["node_id"]);
}

#[tokio::test]
async fn three_nodes_form_one_cluster_and_a_restarted_node_keeps_its_id() {
    let mut cluster = tether_testkit::Cluster::start(
        3,
        DaemonOptions {
            extra_config: "\n[cluster]\nlease_ttl_secs = 2\n".to_string(),
            ..DaemonOptions::default()
        },
    )
    .await;
    let all_up = |v: &Value| {
        let n = nodes(v);
        n.len() == 3 && n.iter().all(|n| n["alive"] == true)
    };
    let view = wait_cluster(cluster.node(2), "the third node sees all three", all_up).await;
    assert_eq!(view["store"], "postgres");
    let first = cluster.node(0).get_ok("/api/v1/cluster").await["node_id"].clone();

    // The node id lives in the data directory: a restart is the same node, not a fourth.
    cluster.node_mut(0).restart().await;
    let again = wait_cluster(cluster.node(0), "the restarted node is back", all_up).await;
    assert_eq!(again["node_id"], first);
}

#[tokio::test]
async fn a_file_uploaded_to_one_node_reaches_the_agent_through_another() {
    let shared = tempfile::tempdir().unwrap();
    let cluster = tether_testkit::Cluster::start(
        2,
        DaemonOptions {
            extra_config: format!(
                "\n[cluster]\nlease_ttl_secs = 2\nattachments_dir = {:?}\n",
                shared.path().display().to_string()
            ),
            ..DaemonOptions::default()
        },
    )
    .await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let c = a.new_conversation(None).await;
    let log = b"error: node b reads this\n";
    let ids = a
        .upload_ok(
            &c,
            &[tether_testkit::uploads::Part {
                name: "app.log",
                content_type: Some("text/plain"),
                bytes: log,
            }],
        )
        .await;

    // The message goes to the other node; the file is in the shared directory.
    let (status, out) = b
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            serde_json::json!({ "text": "read it", "attachments": ids }),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let turn = b
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let copied = tether_testkit::attachment_copies(&cluster.work_dir);
    assert_eq!(copied.len(), 1, "{copied:?}");
    assert_eq!(std::fs::read(&copied[0]).unwrap(), log);
    // And it is downloadable from either node.
    let (status, _, bytes) = b
        .get_bytes(&format!("/api/v1/attachments/{}", ids[0]))
        .await;
    assert_eq!((status, bytes.as_slice()), (200, &log[..]));
}
