//! Strict resume of a dormant Claude child (issue 10): with a claude that names its
//! session in `get_status`, a resume that comes back in another session is refused
//! before the ledger, the turn version or the prompt move; with one that cannot say
//! before the first prompt, the turn fails `resume_unavailable` instead (see
//! docs/decisions.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::delegation_util::*;
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, bin_path};

fn claude_agent(d: &tempfile::TempDir, name: &str, flags: &[&str]) -> String {
    let mut args = vec![
        "--dialect".to_string(),
        "claude".to_string(),
        "--state-dir".to_string(),
        d.path().join("claude-state").display().to_string(),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    format!(
        "[agents.{name}]\ndriver = \"claude\"\ncommand = {:?}\nargs = {}\n\n",
        bin_path("fake-agent").display().to_string(),
        serde_json::to_string(&args).unwrap()
    )
}

async fn continuation(d: &Daemon, task: &str) -> Value {
    get_ready(d, &format!("/api/v1/conversations/{task}/continuation")).await
}

async fn history_len(d: &Daemon, task: &str) -> usize {
    d.get_ok(&format!("/api/v1/conversations/{task}/messages"))
        .await
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_dormant_claude_child_is_resumed_strictly_before_anything_moves() {
    let state = tempfile::tempdir().unwrap();
    let extra = [
        claude_agent(&state, "claude-sound", &["--get-status"]),
        claude_agent(
            &state,
            "claude-forks",
            &["--get-status", "--resume-other-id"],
        ),
        claude_agent(&state, "claude-old", &["--resume-other-id"]),
    ]
    .concat();
    let mut d = Daemon::start(DaemonOptions {
        extra_config: extra,
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(None).await;
    let sound = delegate(&d, &parent, "claude-sound", "one").await;
    let forks = delegate(&d, &parent, "claude-forks", "two").await;
    let old = delegate(&d, &parent, "claude-old", "three").await;
    for t in [&sound, &forks, &old] {
        assert_eq!(wait_task(&d, &parent, t).await["status"], "completed");
    }
    d.restart().await;
    for t in [&sound, &forks, &old] {
        wait_availability(&d, t, "continuable_resume").await;
    }
    let cont = |task: &str, message: &str, cid: &str| {
        let path = format!("/api/v1/conversations/{task}/continue");
        let body = json!({"message": message, "continuation_id": cid});
        let d = &d;
        async move { d.post(&path, body).await }
    };

    // A resume claude confirms goes on in the same session.
    let (s, r) = cont(&sound, "again", "s1").await;
    assert_eq!((s, r["turn_version"].as_i64()), (200, Some(2)), "{r}");
    let t = wait_task(&d, &parent, &sound).await;
    assert_eq!(t["text"], "echo: again\nremembers 1: [\"one\"]", "{t}");

    // claude came back in another session: refused before anything moved.
    let before = history_len(&d, &forks).await;
    let (s, r) = cont(&forks, "again", "f1").await;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (502, Some("resume_unavailable")),
        "{r}"
    );
    let c = continuation(&d, &forks).await;
    assert_eq!(
        (c["turn_version"].as_i64(), c["status"].as_str()),
        (Some(1), Some("completed")),
        "{c}"
    );
    assert_eq!(
        history_len(&d, &forks).await,
        before,
        "the prompt was recorded"
    );
    // No ledger entry: the id is free for another message.
    let (s, r) = cont(&forks, "something else", "f1").await;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (502, Some("resume_unavailable")),
        "{r}"
    );

    // A claude without get_status can only tell with the first turn: the continuation
    // is accepted (and recorded), and its turn fails resume_unavailable with nothing
    // of it shown; the session can be tried again later.
    let (s, accepted) = cont(&old, "again", "o1").await;
    assert_eq!(
        (s, accepted["turn_version"].as_i64()),
        (200, Some(2)),
        "{accepted}"
    );
    let t = wait_task(&d, &parent, &old).await;
    assert_eq!(
        (t["status"].as_str(), t["error_code"].as_str()),
        (Some("failed"), Some("resume_unavailable")),
        "{t}"
    );
    assert!(t.get("text").is_none(), "{t}");
    assert_eq!(t["availability"], "continuable_resume", "{t}");
    let (s, again) = cont(&old, "again", "o1").await;
    assert_eq!((s, &again), (200, &accepted));
}
