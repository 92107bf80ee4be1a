//! Delegation continuation rules through a real `tether serve` (issue 10): outcome events
//! of tasks without a parent, the start-up rebuild with a broken row, one continuation id
//! raced on two tasks, failures while making a child live, the keep-alive cap and the
//! running-children cap on continue.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::delegation_util::*;
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

#[tokio::test]
async fn outcomes_of_tasks_without_a_parent_go_on_the_childs_stream() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let token = d.token.clone();
    let started = http_tool(
        &d,
        &token,
        "delegate_to_agent",
        json!({"agent_type": "fake", "task": "external"}),
    )
    .await;
    let task = started["task_id"].as_str().unwrap().to_string();
    let wait = json!({"task_ids": [task], "wait_ms": 15000});
    let r = http_tool(&d, &token, "get_delegation_status", wait.clone()).await;
    let snap = &r["tasks"][0];
    assert_eq!(
        (snap["status"].as_str(), snap["turn_version"].as_i64()),
        (Some("completed"), Some(1)),
        "{r}"
    );
    assert_eq!(snap["text"], "echo: external\nremembers 0: []");
    let child = bound_session(&d, &task).await;
    let done = wait_event(&d, &child, "delegation_completed on the child", |e| {
        e["payload"]["type"] == "delegation_completed" && e["payload"]["task_id"] == task.as_str()
    })
    .await;
    assert_eq!(done["payload"]["turn_version"], 1);
    assert_eq!(done["payload"]["outcome"]["status"], "completed");
    assert_eq!(done["payload"]["outcome"]["text"], snap["text"]);

    // A continuation's outcome is an update on the same stream.
    let cont = http_tool(
        &d,
        &token,
        "continue_with_session",
        json!({"task_id": task, "message": "more", "continuation_id": "e1"}),
    )
    .await;
    assert_eq!(cont["turn_version"], 2, "{cont}");
    let r = http_tool(&d, &token, "get_delegation_status", wait).await;
    assert_eq!(r["tasks"][0]["status"], "completed", "{r}");
    let update = wait_event(&d, &child, "delegation_session_update on the child", |e| {
        e["payload"]["type"] == "delegation_session_update"
    })
    .await;
    assert_eq!(update["payload"]["turn_version"], 2);
    assert_eq!(update["payload"]["outcome"]["text"], r["tasks"][0]["text"]);
}

#[tokio::test]
async fn start_up_rebuild_isolates_a_broken_row() {
    let mut d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let broken = delegate(&d, &parent, "fake", "hang").await;
    let fine = delegate(&d, &parent, "fake", "hang").await;
    wait_availability(&d, &broken, "running").await;
    wait_availability(&d, &fine, "running").await;
    // The one continued below must be resumable after the kill.
    wait_child_session(&d, &fine).await;
    let parent_session = bound_session(&d, &parent).await;

    // Between two runs, one task's turn row gets a value no tether version wrote.
    d.kill9().await;
    let db = d.db_path();
    within("corrupt a row", async {
        use sqlx::ConnectOptions;
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&db)
            .connect()
            .await
            .unwrap();
        sqlx::query("UPDATE delegation_turns SET origin = 'bogus' WHERE task_id = ?")
            .bind(&broken)
            .execute(&mut conn)
            .await
            .unwrap();
    })
    .await;
    d.relaunch().await;

    // The rebuild runs at start-up: delegation requests wait for it...
    let path = format!("/api/v1/conversations/{fine}/continuation");
    let mut rebuilding = 0;
    let c = within("rebuild ends", async {
        loop {
            let (status, body) = d.get(&path).await;
            if status == 503 {
                assert_eq!(body["error"]["code"], "rebuilding", "{body}");
                rebuilding += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            assert_eq!(status, 200, "{body}");
            return body;
        }
    })
    .await;
    assert!(rebuilding > 0, "no request saw the rebuild");
    assert_eq!(c["status"], "failed", "{c}");
    // ...which lifted only once every row was handled: the sound row was reported, the
    // broken one (retried, then given up) recorded as such on the parent's stream.
    let events = session_events(&d, &parent_session).await;
    let reported: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["type"] == "delegation_completed")
        .collect();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0]["payload"]["task_id"], fine.as_str());
    assert_eq!(reported[0]["payload"]["outcome"]["status"], "failed");
    let failed = events
        .iter()
        .filter(|e| e["payload"]["type"] == "status")
        .filter_map(|e| e["payload"]["text"].as_str())
        .find(|t| t.contains("could not be reported"));
    assert!(failed.is_some(), "{events:?}");
    // The rest of delegation works.
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": fine, "message": "go on", "continuation_id": "r1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2, "{r}");
    let t = wait_task(&d, &parent, &fine).await;
    assert_eq!(t["status"], "completed", "{t}");
}

/// POSTs `body` to a task's `/continue` or `/close`.
async fn post_task(d: &Daemon, task: &str, action: &str, body: Value) -> (u16, Value) {
    d.post(&format!("/api/v1/conversations/{task}/{action}"), body)
        .await
}

#[tokio::test]
async fn one_continuation_id_raced_on_two_tasks_is_a_conflict() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let parent = d.new_conversation(None).await;
    let a = delegate(&d, &parent, "fake", "a").await;
    wait_task(&d, &parent, &a).await;
    for round in 0..3 {
        let b = delegate(&d, &parent, "fake", &format!("b{round}")).await;
        wait_task(&d, &parent, &b).await;
        // Two continuations of two tasks of one parent, one id.
        let cid = format!("same-{round}");
        let (ra, rb) = tokio::join!(
            post_task(
                &d,
                &a,
                "continue",
                json!({"message": "x", "continuation_id": cid})
            ),
            post_task(
                &d,
                &b,
                "continue",
                json!({"message": "y", "continuation_id": cid})
            ),
        );
        let mut statuses = [ra.0, rb.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "{ra:?} {rb:?}");
        let lost = if ra.0 == 409 { &ra.1 } else { &rb.1 };
        assert_eq!(lost["error"]["code"], "continuation_conflict", "{lost}");
        let (winner, loser) = if ra.0 == 200 { (&a, &b) } else { (&b, &a) };
        wait_task(&d, &parent, winner).await;
        let c = get_ready(&d, &format!("/api/v1/conversations/{loser}/continuation")).await;
        assert_ne!(c["status"], "running", "the loser ran: {c}");

        // A continuation and a close, one id: the close never half happens.
        let cid = format!("mixed-{round}");
        let (ra, rb) = tokio::join!(
            post_task(
                &d,
                &a,
                "continue",
                json!({"message": "z", "continuation_id": cid})
            ),
            post_task(&d, &b, "close", json!({"continuation_id": cid})),
        );
        let mut statuses = [ra.0, rb.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "{ra:?} {rb:?}");
        let cb = get_ready(&d, &format!("/api/v1/conversations/{b}/continuation")).await;
        let session = d
            .get_ok(&format!("/api/v1/sessions/{}", bound_session(&d, &b).await))
            .await;
        if rb.0 == 200 {
            assert_eq!(ra.1["error"]["code"], "continuation_conflict", "{ra:?}");
            assert_eq!(cb["availability"], "released", "{cb}");
        } else {
            assert_eq!(rb.1["error"]["code"], "continuation_conflict", "{rb:?}");
            // Not released, and its process was not ended either.
            assert_eq!(cb["availability"], "continuable_live", "{cb}");
            assert_eq!(session["status"], "live", "{session}");
            wait_task(&d, &parent, &a).await;
        }
    }
}

/// A wrapper script for the fake agent that reads extra arguments from a file, so a test
/// can change how the agent behaves between runs (or delete the script).
struct Wrapper {
    dir: tempfile::TempDir,
}

impl Wrapper {
    fn new() -> Wrapper {
        let w = Wrapper {
            dir: tempfile::tempdir().unwrap(),
        };
        w.install();
        w.flags("");
        w
    }

    fn script(&self) -> std::path::PathBuf {
        self.dir.path().join("agent.sh")
    }

    fn install(&self) {
        let body = format!(
            "#!/bin/sh\nexec {:?} --state-dir {:?} $(cat {:?}) \"$@\"\n",
            bin_path("fake-agent"),
            self.dir.path().join("state"),
            self.dir.path().join("flags"),
        );
        std::fs::write(self.script(), body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.script(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn flags(&self, flags: &str) {
        std::fs::write(self.dir.path().join("flags"), flags).unwrap();
    }

    fn config(&self) -> String {
        format!(
            "[agents.wrapped]\ndriver = \"acp\"\ncommand = {:?}\n",
            self.script().display().to_string()
        )
    }
}

#[tokio::test]
async fn failures_making_a_child_live_keep_their_own_codes() {
    let w = Wrapper::new();
    let mut d = Daemon::start(DaemonOptions {
        start_timeout_secs: 2,
        extra_config: w.config(),
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(None).await;
    let task = delegate(&d, &parent, "wrapped", "first").await;
    assert_eq!(wait_task(&d, &parent, &task).await["status"], "completed");
    d.restart().await;
    wait_availability(&d, &task, "continuable_resume").await;
    let cont = |n: u32, message: &str| {
        let body = json!({"message": message, "continuation_id": format!("k{n}")});
        let d = &d;
        let task = task.clone();
        async move { post_task(d, &task, "continue", body).await }
    };
    let code = |r: &(u16, Value)| (r.0, r.1["error"]["code"].as_str().map(str::to_string));

    // The agent starts but never finishes its handshake: a start time-out.
    w.flags("--no-initialize-reply");
    let r = cont(1, "again").await;
    assert_eq!(code(&r), (504, Some("start_timeout".into())), "{r:?}");
    // The program is gone: spawn_failed.
    std::fs::remove_file(w.script()).unwrap();
    let r = cont(2, "again").await;
    assert_eq!(code(&r), (502, Some("spawn_failed".into())), "{r:?}");
    // It starts but refuses the session: the one case of resume_unavailable.
    w.install();
    w.flags("--refuse-resume");
    let r = cont(3, "again").await;
    assert_eq!(code(&r), (502, Some("resume_unavailable".into())), "{r:?}");
    // None of them changed the task.
    let c = get_ready(&d, &format!("/api/v1/conversations/{task}/continuation")).await;
    assert_eq!(
        (c["turn_version"].as_i64(), c["availability"].as_str()),
        (Some(1), Some("continuable_resume")),
        "{c}"
    );
    // Healthy again: the same session goes on; a busy one is session_still_running.
    w.flags("");
    let r = cont(4, "hang").await;
    assert_eq!(r.0, 200, "{r:?}");
    assert_eq!(r.1["turn_version"], 2);
    let r = cont(5, "more").await;
    assert_eq!(
        code(&r),
        (409, Some("session_still_running".into())),
        "{r:?}"
    );
}

/// The availability of each task, in order.
async fn availabilities(d: &Daemon, tasks: &[&String]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tasks {
        let c = get_ready(d, &format!("/api/v1/conversations/{t}/continuation")).await;
        out.push(c["availability"].as_str().unwrap_or_default().to_string());
    }
    out
}

#[tokio::test]
async fn the_keep_alive_cap_counts_children_only_oldest_idle_first() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[pool]\nmax_live_per_owner = 2\nmax_live = 16\n".to_string(),
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(None).await;
    let mut kids = Vec::new();
    for n in 1..=3 {
        let t = delegate(&d, &parent, "fake", &format!("child {n}")).await;
        wait_task(&d, &parent, &t).await;
        kids.push(t);
    }
    let (c1, c2, c3) = (&kids[0], &kids[1], &kids[2]);
    let live = "continuable_live";
    let resume = "continuable_resume";
    // Two children fit beside the parent's own live session: the third evicted the first.
    wait_availability(&d, c1, resume).await;
    assert_eq!(
        availabilities(&d, &[c1, c2, c3]).await,
        [resume, live, live]
    );
    // c2 is used again, so c3 is now the oldest idle child: the next child evicts it.
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": c2, "message": "again", "continuation_id": "k1"}),
    )
    .await;
    assert_eq!(r["turn_version"], 2, "{r}");
    wait_task(&d, &parent, c2).await;
    let c4 = delegate(&d, &parent, "fake", "child 4").await;
    wait_task(&d, &parent, &c4).await;
    wait_availability(&d, c3, resume).await;
    assert_eq!(
        availabilities(&d, &[c1, c2, c3, &c4]).await,
        [resume, live, resume, live]
    );
    // The parent's own session was never a candidate.
    let ps = bound_session(&d, &parent).await;
    let s = d.get_ok(&format!("/api/v1/sessions/{ps}")).await;
    assert_eq!(s["status"], "live", "{s}");
    let dormant = session_events(&d, &ps)
        .await
        .into_iter()
        .filter(|e| e["payload"]["type"] == "session_dormant")
        .count();
    assert_eq!(dormant, 0);
}

#[tokio::test]
async fn the_running_children_cap_holds_on_continue() {
    let d = Daemon::start(DaemonOptions {
        extra_config: "[delegation]\nmax_running_children = 2\n".to_string(),
        ..DaemonOptions::default()
    })
    .await;
    let parent = d.new_conversation(None).await;
    let mut tasks = Vec::new();
    for n in 0..6 {
        let t = delegate(&d, &parent, "fake", &format!("task {n}")).await;
        wait_task(&d, &parent, &t).await;
        tasks.push(t);
    }
    // Six continuations at once (people and the parent share the cap).
    let calls = tasks.iter().enumerate().map(|(n, t)| {
        let body = json!({"message": "hang", "continuation_id": format!("h{n}")});
        post_task(&d, t, "continue", body)
    });
    let results = futures::future::join_all(calls).await;
    let ok = results.iter().filter(|r| r.0 == 200).count();
    assert_eq!(ok, 2, "{results:?}");
    for r in results.iter().filter(|r| r.0 != 200) {
        assert_eq!(
            (r.0, r.1["error"]["code"].as_str()),
            (429, Some("concurrency_limit")),
            "{r:?}"
        );
    }
    let kids = d
        .get_ok(&format!("/api/v1/conversations/{parent}/delegations"))
        .await;
    let running = kids
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["status"] == "running")
        .count();
    assert_eq!(running, 2, "{kids}");
    // The parent's own continue is refused the same way.
    let idle = tasks
        .iter()
        .zip(&results)
        .find(|(_, r)| r.0 != 200)
        .map(|(t, _)| t.clone())
        .unwrap();
    let r = mcp(
        &d,
        &parent,
        "continue_with_session",
        json!({"task_id": idle, "message": "x", "continuation_id": "p1"}),
    )
    .await;
    assert_eq!(r["error_code"], "concurrency_limit", "{r}");
}
