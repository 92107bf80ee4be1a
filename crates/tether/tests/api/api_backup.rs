//! End to end: `tether backup` while the daemon runs a turn, then `tether restore` into
//! a wiped data directory (issue 31): the conversations, their history, attachments and
//! sessions come back, and the next message continues the same session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tether_testkit::uploads::Part;
use tether_testkit::{Daemon, DaemonOptions, within};

#[tokio::test]
async fn a_backup_taken_mid_turn_restores_conversations_files_and_sessions() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let backup = d.home.path().join("backup");
    let backup_arg = backup.display().to_string();
    if d.database_url().is_some() {
        // PostgreSQL: the command says to use PostgreSQL's tools, and changes nothing.
        let out = d.cli(&["backup", &backup_arg]).await;
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("pg_dump"));
        return;
    }
    let c = d.new_conversation(None).await;
    let (first, _) = d.say_and_wait(&c, "remember plums").await;
    let session = first["session_id"].as_str().unwrap().to_owned();
    let ids = d
        .upload_ok(
            &c,
            &[Part {
                name: "notes.txt",
                content_type: Some("text/plain"),
                bytes: b"plum notes\n",
            }],
        )
        .await;
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "read this", "attachments": ids}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    d.wait_turn(&session, body["turn_id"].as_str().unwrap())
        .await;
    // A turn runs while the backup is taken.
    d.say(&c, "stream 20 50").await;
    d.wait_conversation(&c, "turn running", |v| v["state"] == "bound/running")
        .await;
    let out = d.cli(&["backup", &backup_arg]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("backed up 1 conversations"), "{text}");
    assert!(text.contains("1 attachment files"), "{text}");
    // A backup never goes into a directory that holds something.
    let again = d.cli(&["backup", &backup_arg]).await;
    assert!(!again.status.success());

    // A restore refuses while the daemon runs.
    let busy = d.cli(&["restore", &backup_arg]).await;
    assert!(!busy.status.success());
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("already serving"),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );

    // The machine is lost: the data directory goes, the backup comes back.
    d.kill9().await;
    std::fs::remove_dir_all(d.data_dir()).unwrap();
    let out = within("restore", d.cli(&["restore", &backup_arg])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("restored 1 conversations"));
    d.launch_again().await;
    let hist = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let hist_text = hist.to_string();
    assert!(
        hist_text.contains("remember plums") && hist_text.contains("notes.txt"),
        "{hist}"
    );
    // The file itself is back.
    let att = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(att["binding"]["session_id"], session.as_str(), "{att}");
    let (reply, done) = d.say_and_wait(&c, "what do you remember").await;
    assert_eq!(reply["session_id"], session.as_str());
    assert!(done.to_string().contains("plums"), "{done}");
    let file = d
        .client
        .get(d.url(&format!("/api/v1/attachments/{}", ids[0])))
        .bearer_auth(&d.token)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(file.status(), 200);
    assert_eq!(file.text().await.unwrap(), "plum notes\n");
}
