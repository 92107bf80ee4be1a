//! End to end: `tether serve` keeps its store in PostgreSQL when `TETHER_DATABASE_URL`
//! names one (the same holds for `serve --database` and `[store] url`, resolved by
//! `config_store`): turns and events are rows of that database, nothing is written to a
//! SQLite file, a SIGKILL and restart keep the conversation and its session, and
//! `tether doctor` names the store without its password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sqlx::Connection;
use tether_testkit::postgres::TestDatabase;
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

#[tokio::test]
async fn the_daemon_stores_everything_in_the_postgres_database_it_is_given() {
    let db = tokio::time::timeout(Duration::from_secs(120), TestDatabase::create())
        .await
        .expect("timed out creating a test database")
        .unwrap();
    let mut d = Daemon::start(DaemonOptions {
        env: vec![("TETHER_DATABASE_URL".to_string(), db.url.clone())],
        ..DaemonOptions::default()
    })
    .await;
    let conv = d.new_conversation(None).await;
    let (first, turn) = d.say_and_wait(&conv, "remember apples").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let session = first["session_id"].as_str().unwrap().to_string();

    // The rows are in PostgreSQL, and no SQLite database was made.
    let mut pg = within("connect", sqlx::PgConnection::connect(&db.url))
        .await
        .unwrap();
    let (turns,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM turns WHERE conversation_id = $1")
        .bind(&conv)
        .fetch_one(&mut pg)
        .await
        .unwrap();
    assert_eq!(turns, 1);
    let (events,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM events WHERE kind = 'turn_completed' \
         AND session_num = (SELECT num FROM sessions WHERE id = $1)",
    )
    .bind(&session)
    .fetch_one(&mut pg)
    .await
    .unwrap();
    assert_eq!(events, 1);
    assert!(!d.db_path().exists(), "a SQLite store was created too");

    // A SIGKILL and restart: the same database, the same binding, the session resumed.
    d.restart().await;
    let c = d.get_ok(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["binding"]["session_id"], session.as_str(), "{c}");
    let (again, turn) = d
        .say_and_wait(&conv, "what did I ask you to remember?")
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert_eq!(again["session_id"], session.as_str());
    let history = d
        .get_ok(&format!("/api/v1/conversations/{conv}/messages"))
        .await;
    let users = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 2, "{history}");

    // doctor names the store (a password would be hidden).
    let out = within(
        "tether doctor",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(d.home.path().join("tether.toml"))
            .arg("doctor")
            .env("TETHER_DATABASE_URL", &db.url)
            .env_remove("TETHER_HOME")
            .output(),
    )
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("store:           postgres {}", db.url)),
        "{report}"
    );
    let _ = pg.close().await;
}

#[tokio::test]
async fn serve_refuses_a_database_url_it_cannot_use() {
    let home = tempfile::tempdir().unwrap();
    let out = within(
        "tether serve --database",
        tokio::process::Command::new(bin_path("tether"))
            .args(["serve", "--listen", "127.0.0.1:0", "--database"])
            .arg("mysql://me:secret@db/t")
            .env("TETHER_HOME", home.path())
            .env("HOME", home.path())
            .env_remove("TETHER_CONFIG")
            .env_remove("TETHER_DATABASE_URL")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .output(),
    )
    .await
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--database"), "{err}");
    assert!(
        err.contains("mysql://me:***@db/t"),
        "the password is hidden: {err}"
    );
    assert!(!err.contains("secret"), "{err}");
}
