//! End to end: schema changes across tether versions (issue 31). Two "builds" from one
//! binary: with `TETHER_TEST_SCHEMA_NEXT` (test builds only) it is the next version,
//! with migrations this version does not know. An expand-only migration leaves the older
//! version working on the same database; a contract migration (`-- tether:
//! breaks-older`) makes the older version refuse to start, naming both versions, before
//! it writes anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_testkit::{Daemon, DaemonOptions};

const NEXT: &str = "TETHER_TEST_SCHEMA_NEXT";

fn next_build(dir: &std::path::Path, contract: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("version"), "9.9.9\n").unwrap();
    std::fs::write(
        dir.join("9001_next_expand.sql"),
        "-- the next version's new table\nCREATE TABLE next_notes (id BIGINT PRIMARY KEY, body TEXT NOT NULL);\n",
    )
    .unwrap();
    if contract {
        std::fs::write(
            dir.join("9002_next_contract.sql"),
            "-- tether: breaks-older\nALTER TABLE next_notes ADD COLUMN owner TEXT;\n",
        )
        .unwrap();
    }
}

#[tokio::test]
async fn an_older_version_runs_after_an_expand_and_refuses_after_a_contract() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let (first, _) = d.say_and_wait(&c, "remember figs").await;
    let session = first["session_id"].as_str().unwrap().to_owned();

    // The next version (an expand step) runs on the store and records itself.
    let expand = d.home.path().join("next-expand");
    next_build(&expand, false);
    d.kill9().await;
    d.set_env(NEXT, Some(expand.to_str().unwrap()));
    d.launch_again().await;
    let nodes = d.get_ok("/api/v1/cluster").await;
    assert_eq!(nodes["nodes"][0]["version"], "9.9.9", "{nodes}");
    d.say_and_wait(&c, "still here").await;

    // Back to this version: it runs on the expanded schema, the session continues.
    d.kill9().await;
    d.set_env(NEXT, None);
    d.launch_again().await;
    let (again, done) = d.say_and_wait(&c, "what do you remember").await;
    assert_eq!(again["session_id"], session.as_str());
    assert!(done.to_string().contains("figs"), "{done}");
    let nodes = d.get_ok("/api/v1/cluster").await;
    assert_eq!(nodes["nodes"][0]["version"], env!("CARGO_PKG_VERSION"));

    // The next version contracts the schema: this version now refuses to start.
    let contract = d.home.path().join("next-contract");
    next_build(&contract, true);
    d.kill9().await;
    d.set_env(NEXT, Some(contract.to_str().unwrap()));
    d.launch_again().await;
    d.kill9().await;
    d.set_env(NEXT, None);
    let (status, stderr) = d.serve_refused().await;
    assert!(!status.success());
    assert!(
        stderr.contains("9.9.9")
            && stderr.contains(env!("CARGO_PKG_VERSION"))
            && stderr.contains("migration 9002"),
        "{stderr}"
    );
    // The next version still runs on it, with everything there.
    d.set_env(NEXT, Some(contract.to_str().unwrap()));
    d.launch_again().await;
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    assert!(hist.to_string().contains("remember figs"));
}
