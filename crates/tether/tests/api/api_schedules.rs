//! Scheduled turns end to end (issue 30) with the fake agent: a run waits in the
//! conversation's queue behind a running turn and runs once; intervals run, pause,
//! resume and stop when deleted; a fresh session per run; a schedule that keeps failing
//! pauses itself; missed runs after a restart run once or are skipped by policy; bad
//! input names the field and stores nothing; `/every`, `/at` and `/schedules` as
//! commands (the same on every channel).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, within_for};

use crate::reliability_util::agents_per_dialect;

const CONFIG: &str = "[schedules]\nmin_interval_secs = 2\nmax_per_conversation = 3\n\
     max_failures = 2\nmissed_after_secs = 1\ntime_zone = \"UTC\"\n";

async fn daemon() -> (Daemon, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let mut config = agents_per_dialect("", state.path(), &[]);
    config.push_str(CONFIG);
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    (d, state)
}

/// Every turn of every session of conversation `c` (the sessions its history names),
/// oldest first.
async fn all_turns(d: &Daemon, c: &str) -> Vec<Value> {
    let history = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages?limit=1000"))
        .await;
    let items = history
        .as_array()
        .cloned()
        .or_else(|| history["messages"].as_array().cloned())
        .unwrap_or_default();
    let mut sessions: Vec<String> = Vec::new();
    for m in items {
        if let Some(sid) = m["session_id"].as_str()
            && !sessions.iter().any(|s| s == sid)
        {
            sessions.push(sid.to_owned());
        }
    }
    let mut out = Vec::new();
    for sid in sessions {
        let t = d.all_turns(&sid).await;
        out.extend(t.as_array().cloned().unwrap_or_default());
    }
    out.sort_by_key(|t| t["created_at_ms"].as_i64());
    out
}

async fn wait_turns(d: &Daemon, c: &str, n: usize, secs: u64) -> Vec<Value> {
    within_for("scheduled turns", Duration::from_secs(secs), async {
        loop {
            let all = all_turns(d, c).await;
            let ended = all
                .iter()
                .filter(|t| !matches!(t["status"].as_str(), Some("running" | "queued")))
                .count();
            if ended >= n {
                return all;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

async fn history(d: &Daemon, c: &str) -> String {
    d.get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await
        .to_string()
}

#[tokio::test]
async fn a_run_waits_behind_the_running_turn_and_runs_once_in_the_same_session() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("codex")).await;
    let (first, _) = d.say_and_wait(&c, "remember plums").await;
    let busy = d.say(&c, "sleep 4000").await;
    assert_eq!(busy["outcome"], "started", "{busy}");
    let (status, s) = d
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "at": tether_testkit::utc_in(2), "time_zone": "UTC",
                   "prompt": "what do you remember?"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    assert_eq!(s["state"], "active", "{s}");
    assert!(s["next_run_ms"].as_i64().is_some(), "{s}");
    let all = wait_turns(&d, &c, 3, 20).await;
    assert_eq!(all.len(), 3, "{all:?}");
    let run = &all[2];
    assert_eq!(run["input"], "what do you remember?", "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    // It waited for the running turn: it started after that one ended.
    assert!(
        run["started_at_ms"].as_i64().unwrap() >= all[1]["ended_at_ms"].as_i64().unwrap(),
        "{all:?}"
    );
    // The same session, which remembers.
    assert_eq!(run["session_id"], first["session_id"], "{run}");
    assert!(
        run["result_text"]
            .as_str()
            .unwrap()
            .contains("remember plums"),
        "{run}"
    );
    assert!(history(&d, &c).await.contains("⏰ Scheduled run of"));
    let id = s["id"].as_str().unwrap();
    let done = d.get_ok(&format!("/api/v1/schedules/{id}")).await;
    assert_eq!(done["state"], "done", "{done}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(all_turns(&d, &c).await.len(), 3, "once");
}

#[tokio::test]
async fn an_interval_runs_pauses_resumes_and_a_fresh_session_each_run_if_asked() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("claude")).await;
    let (status, s) = d
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "every": "2s", "prompt": "tick",
                   "fresh_session": true}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let id = s["id"].as_str().unwrap().to_owned();
    let two = wait_turns(&d, &c, 2, 15).await;
    assert_eq!(two[0]["input"], "tick", "{two:?}");
    assert_ne!(
        two[0]["session_id"], two[1]["session_id"],
        "a session per run"
    );
    let (status, p) = d
        .patch(&format!("/api/v1/schedules/{id}"), json!({"paused": true}))
        .await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["state"], "paused");
    assert!(p["next_run_ms"].is_null(), "{p}");
    let n = all_turns(&d, &c).await.len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(all_turns(&d, &c).await.len(), n, "paused: no run");
    let (_, r) = d
        .patch(
            &format!("/api/v1/schedules/{id}"),
            json!({"paused": false, "fresh_session": false}),
        )
        .await;
    assert_eq!(r["state"], "active", "{r}");
    wait_turns(&d, &c, n + 1, 15).await;
    let (status, _) = d.delete(&format!("/api/v1/schedules/{id}")).await;
    assert_eq!(status, 204);
    let m = all_turns(&d, &c).await.len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        all_turns(&d, &c).await.len() <= m + 1,
        "deleted: no more runs"
    );
    let (status, _) = d.get(&format!("/api/v1/schedules/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_schedule_that_keeps_failing_pauses_with_a_status_line() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("acp")).await;
    let (_, s) = d
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "every": "2s", "prompt": "fail"}),
        )
        .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let paused = within_for("the pause", Duration::from_secs(20), async {
        loop {
            let v = d.get_ok(&format!("/api/v1/schedules/{id}")).await;
            if v["state"] == "paused" {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(paused["failures"], 2, "{paused}");
    assert!(
        paused["note"].as_str().unwrap().contains("2 failed runs"),
        "{paused}"
    );
    assert!(
        history(&d, &c)
            .await
            .contains("paused after 2 failed runs in a row")
    );
    let ran = all_turns(&d, &c).await.len();
    assert_eq!(ran, 2, "not retried for ever");
}

#[tokio::test]
async fn missed_runs_after_a_restart_run_once_or_are_skipped() {
    let state = tempfile::tempdir().unwrap();
    let mut config = agents_per_dialect("", state.path(), &[]);
    config.push_str(CONFIG);
    let mut d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    let once = d.new_conversation(Some("codex")).await;
    let skip = d.new_conversation(Some("codex")).await;
    for (c, missed) in [(&once, "run_once"), (&skip, "skip")] {
        let (status, s) = d
            .post(
                "/api/v1/schedules",
                json!({"conversation_id": c, "every": "1h", "prompt": "hourly check",
                       "missed": missed}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
    }
    // Both are due in an hour: the store's clock moves the runs into the past while the
    // daemon is down (what an hour-long outage does), then it starts again.
    d.kill9().await;
    move_runs_back(&d).await;
    d.relaunch().await;
    let ran = wait_turns(&d, &once, 1, 15).await;
    assert_eq!(ran[0]["input"], "hourly check", "{ran:?}");
    assert!(
        history(&d, &once)
            .await
            .contains("missed while tether was down")
    );
    within_for("the skip line", Duration::from_secs(10), async {
        while !history(&d, &skip).await.contains("was skipped") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(all_turns(&d, &skip).await.is_empty(), "skipped");
    assert_eq!(all_turns(&d, &once).await.len(), 1, "once, not a burst");
    // Both go on at their next time, an hour on.
    let list = d
        .get_ok(&format!("/api/v1/schedules?conversation_id={skip}"))
        .await;
    let next = list["schedules"][0]["next_run_ms"].as_i64().unwrap();
    assert!(
        next > ran[0]["started_at_ms"].as_i64().unwrap() + 3_000_000,
        "{list}"
    );
}

/// Moves every scheduled run an hour (and 5 s) into the past, as an hour-long outage
/// would find them, in the daemon's store (SQLite, or PostgreSQL in the suite's second
/// run).
async fn move_runs_back(d: &Daemon) {
    use sqlx::Connection;
    let queries = [
        "UPDATE timers SET due_at = due_at - 3605000 WHERE kind = 'schedule_run'",
        "UPDATE schedules SET start_at = start_at - 3605000, next_run_at = next_run_at - 3605000",
    ];
    match d.database_url() {
        Some(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            for q in queries {
                sqlx::query(q).execute(&mut conn).await.unwrap();
            }
        }
        None => {
            let db = d.data_dir().join("tether.db");
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
                .await
                .unwrap();
            for q in queries {
                sqlx::query(q).execute(&mut conn).await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn bad_schedules_name_the_field_and_nothing_is_stored() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("codex")).await;
    let long = "x".repeat(300 * 1024);
    for (body, field) in [
        (
            json!({"conversation_id": c, "cron": "61 * * * *", "prompt": "p"}),
            "cron",
        ),
        (
            json!({"conversation_id": c, "every": "sometimes", "prompt": "p"}),
            "when",
        ),
        (
            json!({"conversation_id": c, "every": "1s", "prompt": "p"}),
            "minimum",
        ),
        (
            json!({"conversation_id": c, "every": "1h", "time_zone": "Mars/Olympus", "prompt": "p"}),
            "time_zone",
        ),
        (
            json!({"conversation_id": c, "at": "2020-01-01T10:00", "prompt": "p"}),
            "at",
        ),
        (
            json!({"conversation_id": c, "every": "1h", "prompt": long}),
            "prompt",
        ),
        (
            json!({"conversation_id": c, "every": "1h", "prompt": "  "}),
            "prompt",
        ),
        (
            json!({"conversation_id": c, "every": "1h", "cron": "0 9 * * *", "prompt": "p"}),
            "one of them",
        ),
        (
            json!({"conversation_id": c, "every": "1h", "prompt": "p", "missed": "maybe"}),
            "missed",
        ),
    ] {
        let (status, err) = d.post("/api/v1/schedules", body.clone()).await;
        assert_eq!(status, 400, "{err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{field}: {message}");
    }
    let (status, _) = d
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": "nope", "every": "1h", "prompt": "p"}),
        )
        .await;
    assert_eq!(status, 404);
    let list = d.get_ok("/api/v1/schedules").await;
    assert_eq!(list["schedules"].as_array().unwrap().len(), 0, "{list}");
    // Too many on one conversation (3 here).
    for i in 0..3 {
        let (status, s) = d
            .post(
                "/api/v1/schedules",
                json!({"conversation_id": c, "every": "1h", "prompt": format!("p{i}")}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
    }
    let (status, err) = d
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "every": "1h", "prompt": "p4"}),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert!(err.to_string().contains("conversation_id"), "{err}");
}

#[tokio::test]
async fn every_at_and_schedules_work_as_commands() {
    let (d, _state) = daemon().await;
    let c = d.new_conversation(Some("codex")).await;
    let r = d
        .say(&c, "/every weekday 09:00 pull and run the tests")
        .await;
    let text = r["reply"].as_str().unwrap().to_owned();
    assert!(text.starts_with("⏰ Scheduled sch_"), "{r}");
    assert!(text.contains("cron 0 9 * * 1-5"), "{r}");
    assert!(text.contains("09:00 UTC"), "{r}");
    let id = text
        .split_whitespace()
        .nth(2)
        .unwrap()
        .trim_end_matches(|c: char| !c.is_alphanumeric())
        .to_owned();
    let r = d.say(&c, "/at 2099-12-24 18:00 wrap the presents").await;
    assert!(
        r["reply"]
            .as_str()
            .unwrap()
            .contains("once at 2099-12-24 18:00"),
        "{r}"
    );
    let r = d.say(&c, "/schedules").await;
    let list = r["reply"].as_str().unwrap();
    assert!(
        list.contains(&id) && list.contains("wrap the presents"),
        "{list}"
    );
    let r = d.say(&c, &format!("/schedules pause {id}")).await;
    assert_eq!(r["reply"], format!("Schedule {id} paused."), "{r}");
    let r = d.say(&c, &format!("/schedules delete {id}")).await;
    assert_eq!(r["reply"], format!("Schedule {id} deleted."), "{r}");
    let (status, err) = d
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "/every now and then do it"}),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert!(err.to_string().contains("when"), "{err}");
    assert!(
        d.say(&c, "/help").await["reply"]
            .as_str()
            .unwrap()
            .contains("/every")
    );
}

#[tokio::test]
async fn a_schedule_of_a_person_who_is_disabled_pauses_and_a_viewer_makes_none() {
    use tether_testkit::people::{Who, person};
    let (d, _state) = daemon().await;
    let owner = Who {
        d: &d,
        token: d.token.clone(),
    };
    let (bob_id, bob) = person(&owner, "bob", "member").await;
    let (_, vera) = person(&owner, "vera", "viewer").await;
    let (_, conv) = bob
        .post("/api/v1/conversations", json!({"agent": "codex"}))
        .await;
    let c = conv["id"].as_str().unwrap().to_owned();
    // Shared with the team: the viewer sees it but may not schedule in it.
    let (status, _) = bob
        .patch(
            &format!("/api/v1/conversations/{c}"),
            json!({"visibility": "team"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, err) = vera
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "every": "2s", "prompt": "tick"}),
        )
        .await;
    assert_eq!(status, 403, "{err}");
    let (status, s) = bob
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "every": "2s", "prompt": "tick"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    assert_eq!(s["owner"], "bob", "{s}");
    let (_, seen) = vera
        .get(&format!("/api/v1/schedules?conversation_id={c}"))
        .await;
    assert_eq!(seen["schedules"].as_array().unwrap().len(), 1, "{seen}");
    // Its runs go out as bob: another member who may write to the conversation may not
    // rewrite or delete them.
    let (_, alice) = person(&owner, "alice", "member").await;
    let sid = s["id"].as_str().unwrap();
    let (status, err) = alice
        .patch(
            &format!("/api/v1/schedules/{sid}"),
            json!({"prompt": "rm -rf /"}),
        )
        .await;
    assert_eq!(status, 403, "{err}");
    let (status, _) = alice.delete(&format!("/api/v1/schedules/{sid}")).await;
    assert_eq!(status, 403);
    // A prompt that would run as a tether command is refused.
    let (status, err) = bob
        .post(
            "/api/v1/schedules",
            json!({"conversation_id": c, "every": "1h", "prompt": "/new other"}),
        )
        .await;
    assert_eq!(status, 400, "{err}");
    assert!(err.to_string().contains("prompt"), "{err}");
    let (status, _) = owner
        .patch(
            &format!("/api/v1/people/{bob_id}"),
            json!({"disabled": true}),
        )
        .await;
    assert_eq!(status, 200);
    let id = s["id"].as_str().unwrap().to_owned();
    let paused = within_for("the pause", Duration::from_secs(15), async {
        loop {
            let v = d.get_ok(&format!("/api/v1/schedules/{id}")).await;
            if v["state"] == "paused" {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        paused["note"]
            .as_str()
            .unwrap()
            .contains("bob was disabled"),
        "{paused}"
    );
}
