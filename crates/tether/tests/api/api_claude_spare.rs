//! End to end (issue 15): the Claude warm spare. With `[pool] claude_spare = true` one
//! Claude process per Claude agent is started ahead of need; a new session in the default
//! working directory and model takes it (its pid becomes the session's) and a replacement
//! starts at once; a resume, another working directory or another model start cold and
//! leave the spare alone; the spare ends with the daemon. Fake agent, claude dialect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::reliability_util;

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, within};

const AGENT: &str = "fake-claude";

async fn daemon(pool: &str) -> Daemon {
    let state = tempfile::tempdir().unwrap().keep();
    let agent = reliability_util::agent_toml(AGENT, "claude", &state, &[]);
    Daemon::start(DaemonOptions {
        extra_config: format!("{agent}[pool]\n{pool}"),
        ..Default::default()
    })
    .await
}

async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
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

/// The pid of the ready spare of [`AGENT`], once there is one other than `not`.
async fn ready_spare(d: &Daemon, not: &[u64]) -> u64 {
    eventually("a ready warm spare", async || {
        let pool = d.get_ok("/api/v1/pool").await;
        pool["spares"].as_array()?.iter().find_map(|s| {
            let pid = s["pid"].as_u64()?;
            (s["agent"] == AGENT && s["ready"] == true && !not.contains(&pid)).then_some(pid)
        })
    })
    .await
}

/// The pid of the process `session` runs in.
async fn session_pid(d: &Daemon, session: &str) -> u64 {
    let pool = d.get_ok("/api/v1/pool").await;
    pool["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == session)
        })
        .and_then(|p| p["pid"].as_u64())
        .unwrap_or_else(|| panic!("no process of {session}: {pool}"))
}

fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

async fn conversation(d: &Daemon, body: Value) -> String {
    let c = d.post_ok("/api/v1/conversations", body).await;
    c["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_new_claude_session_takes_the_spare_which_is_replaced_and_a_resume_does_not() {
    let d = daemon("claude_spare = true\nmax_live = 1\nidle_ttl_secs = 0\n").await;
    let first = ready_spare(&d, &[]).await;

    // A new session takes the spare: its process is the spare's.
    let a = conversation(&d, json!({ "agent": AGENT })).await;
    let (oa, ta) = d.say_and_wait(&a, "alpha one").await;
    assert_eq!(ta["status"], "completed", "{ta}");
    let sa = oa["session_id"].as_str().unwrap().to_owned();
    assert_eq!(
        session_pid(&d, &sa).await,
        first,
        "the session runs in the spare"
    );
    // ... and a replacement is started at once.
    let second = ready_spare(&d, &[first]).await;
    assert!(running(first) && running(second));

    // A resume starts its own process: `--resume` is a start-up argument.
    let b = d.new_conversation(None).await;
    d.say_and_wait(&b, "beta one").await;
    d.wait_conversation(&a, "evicted by the cap of one", |c| {
        c["binding"]["status"] == "dormant"
    })
    .await;
    assert!(!running(first), "the evicted session's process ended");
    let (oa2, ta2) = d.say_and_wait(&a, "alpha two").await;
    assert_eq!(oa2["session_id"], sa.as_str(), "the same session, resumed");
    assert!(
        ta2["result_text"]
            .as_str()
            .unwrap()
            .contains(r#"remembers 1: ["alpha one"]"#),
        "{ta2}"
    );
    let resumed = session_pid(&d, &sa).await;
    assert_ne!(resumed, second, "a resume does not take the spare");
    assert_eq!(
        ready_spare(&d, &[]).await,
        second,
        "the spare is still there"
    );

    // Another working directory or another model: a cold start, the spare stays.
    let sub = d.work_dir().join("elsewhere");
    std::fs::create_dir_all(&sub).unwrap();
    for body in [
        json!({ "agent": AGENT, "cwd": sub.display().to_string() }),
        json!({ "agent": AGENT, "model": "other-model" }),
    ] {
        let c = conversation(&d, body.clone()).await;
        let (oc, tc) = d.say_and_wait(&c, "gamma").await;
        assert_eq!(tc["status"], "completed", "{body}: {tc}");
        let pid = session_pid(&d, oc["session_id"].as_str().unwrap()).await;
        assert_ne!(pid, second, "{body}: not the spare");
        assert_eq!(
            ready_spare(&d, &[]).await,
            second,
            "{body}: the spare stays"
        );
    }

    // The next new session in the defaults takes the spare that waited.
    let e = conversation(&d, json!({ "agent": AGENT })).await;
    let (oe, te) = d.say_and_wait(&e, "delta").await;
    assert_eq!(te["status"], "completed", "{te}");
    assert_eq!(
        session_pid(&d, oe["session_id"].as_str().unwrap()).await,
        second
    );
    let third = ready_spare(&d, &[first, second]).await;
    let out = d.cli(&["doctor"]).await;
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("{AGENT} pid {third} (warm spare, ready)"))
            && report.contains("Claude warm spare on"),
        "{report}"
    );

    // The spare ends with the daemon.
    let daemon_pid = rustix::process::Pid::from_raw(d.pid().unwrap() as i32).unwrap();
    rustix::process::kill_process(daemon_pid, rustix::process::Signal::TERM).unwrap();
    eventually("the spare ends with the daemon", async || {
        (!running(third)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn no_spare_unless_asked() {
    let d = daemon("idle_ttl_secs = 0\n").await;
    let c = conversation(&d, json!({ "agent": AGENT })).await;
    d.say_and_wait(&c, "one").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pool = d.get_ok("/api/v1/pool").await;
    assert_eq!(pool["spares"], json!([]), "{pool}");
}
