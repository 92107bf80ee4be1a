//! Reliability: faulty agents through a real daemon, in all three dialects (ACP, Codex
//! app-server, Claude stream-json). Each fault ends the turn in exactly one terminal
//! event with a stable code, and tether stays healthy: health answers, and a new
//! conversation completes a turn afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::reliability_util;

use std::time::{Duration, Instant};

use crate::reliability_util::{
    DIALECTS, agents_per_dialect, assert_healthy, live_children, proc_status, turn_once,
};
use serde_json::Value;
use tether_testkit::{Daemon, DaemonOptions};

/// A daemon with one agent per dialect (`acp`, `codex`, `claude`) plus `extra`.
async fn start(opts: DaemonOptions, variants: &[(&str, &[&str])]) -> (Daemon, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let mut extra = agents_per_dialect("", state.path(), &[]);
    for (suffix, flags) in variants {
        extra.push_str(&agents_per_dialect(suffix, state.path(), flags));
    }
    extra.push_str(&opts.extra_config);
    let d = Daemon::start(DaemonOptions {
        extra_config: extra,
        ..opts
    })
    .await;
    (d, state)
}

fn text(t: &Value) -> &str {
    t["result_text"].as_str().unwrap_or_default()
}

async fn all_dialects<F, Fut>(f: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    tokio::join!(f(DIALECTS[0]), f(DIALECTS[1]), f(DIALECTS[2]));
}

#[tokio::test]
async fn faulty_agent_crash_mid_turn_fails_once_with_agent_crashed_and_the_session_resumes() {
    let (d, _state) = start(DaemonOptions::default(), &[]).await;
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let c = d.new_conversation(Some(dialect)).await;
            let (o1, t1) = turn_once(d, &c, "before the crash").await;
            assert_eq!(t1["status"], "completed", "{dialect}: {t1}");
            let (o2, t2) = turn_once(d, &c, "crash").await;
            assert_eq!(o2["session_id"], o1["session_id"], "{dialect}");
            assert_eq!(t2["status"], "failed", "{dialect}: {t2}");
            assert_eq!(t2["error_code"], "agent_crashed", "{dialect}: {t2}");
            assert!(
                t2["error_message"]
                    .as_str()
                    .unwrap()
                    .contains("crashing as asked"),
                "{dialect}: the stderr tail is attached: {t2}"
            );
            // The binding stays; the next message resumes the same agent session.
            let (o3, t3) = turn_once(d, &c, "after the crash").await;
            assert_eq!(o3["session_id"], o1["session_id"], "{dialect}");
            assert_eq!(t3["status"], "completed", "{dialect}: {t3}");
            assert!(
                text(&t3).contains(r#"remembers 2: ["before the crash","crash"]"#),
                "{dialect}: {t3}"
            );
        }
    })
    .await;
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_hang_and_freeze_end_with_turn_timeout() {
    let (d, _state) = start(
        DaemonOptions {
            turn_timeout_secs: 2,
            ..Default::default()
        },
        &[],
    )
    .await;
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let c = d.new_conversation(Some(dialect)).await;
            let (o1, _) = turn_once(d, &c, "first").await;
            // `hang` ends when cancelled; `freeze` ignores the cancel too, so its process
            // is ended after the stop grace.
            for (i, fault) in ["hang", "freeze"].into_iter().enumerate() {
                let started = Instant::now();
                let (o, t) = turn_once(d, &c, fault).await;
                let took = started.elapsed();
                eprintln!("{dialect} {fault}: ended after {took:?}");
                assert_eq!(o["session_id"], o1["session_id"], "{dialect} {fault}");
                assert_eq!(t["status"], "failed", "{dialect} {fault}: {t}");
                assert_eq!(t["error_code"], "turn_timeout", "{dialect} {fault}: {t}");
                assert!(
                    took >= Duration::from_secs(2) && took < Duration::from_secs(15),
                    "{dialect} {fault}: ended after {took:?}"
                );
                // The conversation goes on in the same session.
                let (o, t) = turn_once(d, &c, &format!("after {fault}")).await;
                assert_eq!(o["session_id"], o1["session_id"], "{dialect} {fault}");
                assert_eq!(t["status"], "completed", "{dialect} {fault}: {t}");
                assert!(
                    text(&t).contains(&format!("remembers {}:", 2 * i + 2)),
                    "{dialect} {fault}: {t}"
                );
            }
        }
    })
    .await;
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_garbage_junk_and_huge_lines_on_stdout_are_skipped() {
    let (d, _state) = start(DaemonOptions::default(), &[]).await;
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let c = d.new_conversation(Some(dialect)).await;
            for (prompt, reply) in [
                ("garbage", "garbage done"),
                ("junk", "junk done"),
                ("bigline 8192", "bigline done"),
            ] {
                let (_, t) = turn_once(d, &c, prompt).await;
                assert_eq!(t["status"], "completed", "{dialect} {prompt}: {t}");
                assert!(
                    text(&t).starts_with(reply),
                    "{dialect} {prompt}: {}",
                    text(&t).chars().take(300).collect::<String>()
                );
            }
            let (_, t) = turn_once(d, &c, "and now?").await;
            assert!(text(&t).contains("remembers 3:"), "{dialect}: {t}");
        }
    })
    .await;
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_endless_stdout_line_is_dropped_without_holding_memory() {
    let (d, _state) = start(DaemonOptions::default(), &[]).await;
    let pid = d.pid().unwrap();
    let rss_before = proc_status(pid, "VmRSS");
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let c = d.new_conversation(Some(dialect)).await;
            // 48 MiB without a newline: over tether's 32 MiB line cap, dropped.
            let (_, t) = turn_once(d, &c, "bigline 49152").await;
            assert_eq!(t["status"], "completed", "{dialect}: {t}");
            assert!(text(&t).starts_with("bigline done"), "{dialect}: {t}");
            let (_, t) = turn_once(d, &c, "next").await;
            assert!(text(&t).contains("remembers 1:"), "{dialect}: {t}");
        }
    })
    .await;
    let rss_after = proc_status(pid, "VmRSS");
    eprintln!("tether RSS {rss_before} kB before 3 × 48 MiB lines, {rss_after} kB after");
    assert!(
        rss_after < rss_before + 40 * 1024,
        "tether's RSS grew from {rss_before} kB to {rss_after} kB"
    );
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_exit_at_start_is_spawn_failed() {
    let (d, _state) = start(DaemonOptions::default(), &[("-exit", &["--exit-on-start"])]).await;
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let agent = format!("{dialect}-exit");
            let c = d.new_conversation(Some(&agent)).await;
            for attempt in 0..2 {
                let (_, t) = turn_once(d, &c, "hello").await;
                assert_eq!(t["status"], "failed", "{agent} #{attempt}: {t}");
                assert_eq!(t["error_code"], "spawn_failed", "{agent} #{attempt}: {t}");
                assert!(
                    t["error_message"]
                        .as_str()
                        .unwrap()
                        .contains("exiting on start"),
                    "{agent}: the stderr tail is attached: {t}"
                );
            }
        }
    })
    .await;
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_refused_resume_is_resume_unavailable_and_the_binding_stays() {
    let (mut d, state) = start(
        DaemonOptions::default(),
        &[("-refuse", &["--refuse-resume"])],
    )
    .await;
    // Two ways a resume fails: the agent refuses it (ACP `session/load` and Codex
    // `thread/resume` answer an error), or the agent lost the session (all three; claude
    // then exits saying "No conversation found", the only way real claude refuses).
    let mut convs = Vec::new();
    for (dialect, agent) in [
        ("acp", "acp-refuse"),
        ("codex", "codex-refuse"),
        ("acp", "acp"),
        ("codex", "codex"),
        ("claude", "claude"),
    ] {
        let c = d.new_conversation(Some(agent)).await;
        let (o, t) = turn_once(&d, &c, "hello").await;
        assert_eq!(t["status"], "completed", "{agent}: {t}");
        convs.push((dialect, agent, c, o["session_id"].clone()));
    }
    // A restart makes every session dormant: the next turn must resume.
    d.restart().await;
    for (_, agent, _, sid) in &convs {
        if agent.ends_with("-refuse") {
            continue;
        }
        let session = d
            .get_ok(&format!("/api/v1/sessions/{}", sid.as_str().unwrap()))
            .await;
        let external = session["external_id"].as_str().unwrap();
        std::fs::remove_file(state.path().join(format!("{external}.json"))).unwrap();
    }
    for (dialect, agent, c, sid) in &convs {
        for attempt in 0..2 {
            let (o, t) = turn_once(&d, c, "are you there?").await;
            assert_eq!(&o["session_id"], sid, "{agent}: no silent new session");
            assert_eq!(t["status"], "failed", "{agent} #{attempt}: {t}");
            assert_eq!(
                t["error_code"], "resume_unavailable",
                "{agent} ({dialect}): {t}"
            );
            let cv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
            assert_eq!(&cv["binding"]["session_id"], sid, "{agent}: binding stays");
        }
    }
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_that_never_answers_initialize_fails_with_start_timeout_after_the_start_timeout()
 {
    let (d, _state) = start(
        DaemonOptions {
            start_timeout_secs: 2,
            ..Default::default()
        },
        &[("-mute", &["--no-initialize-reply"])],
    )
    .await;
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let agent = format!("{dialect}-mute");
            let c = d.new_conversation(Some(&agent)).await;
            let started = Instant::now();
            let (_, t) = turn_once(d, &c, "hello").await;
            let took = started.elapsed();
            assert_eq!(t["status"], "failed", "{agent}: {t}");
            assert_eq!(t["error_code"], "start_timeout", "{agent}: {t}");
            assert!(
                took >= Duration::from_millis(1900) && took < Duration::from_secs(12),
                "{agent}: failed after {took:?}"
            );
        }
    })
    .await;
    // The mute agents were ended: only the live sessions' processes run.
    let pid = d.pid().unwrap();
    reliability_util::eventually("mute agents are reaped", || async {
        let pool = d.get_ok("/api/v1/pool").await;
        let live = pool["process_count"].as_u64().unwrap_or(0) as usize;
        (live_children(pid).len() == live).then_some(())
    })
    .await;
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}

#[tokio::test]
async fn faulty_agent_stderr_flood_neither_blocks_the_agent_nor_bloats_tether() {
    // 100 000 lines (~10 MB) at start, before the agent reads anything: a parent that did
    // not drain stderr would deadlock the start-up.
    let (d, _state) = start(
        DaemonOptions::default(),
        &[("-flood", &["--stderr-flood", "100000"])],
    )
    .await;
    let pid = d.pid().unwrap();
    let rss_before = proc_status(pid, "VmRSS");
    all_dialects(|dialect| {
        let d = &d;
        async move {
            let agent = format!("{dialect}-flood");
            let c = d.new_conversation(Some(&agent)).await;
            let (_, t) = turn_once(d, &c, "hello").await;
            assert_eq!(t["status"], "completed", "{agent}: {t}");
            // Another ~10 MB in the middle of a turn.
            let (_, t) = turn_once(d, &c, "flood 100000").await;
            assert_eq!(t["status"], "completed", "{agent}: {t}");
            assert!(text(&t).starts_with("flooded 100000"), "{agent}: {t}");
            // A crash now reports a bounded tail, ending with the last lines.
            let (_, t) = turn_once(d, &c, "crash").await;
            assert_eq!(t["error_code"], "agent_crashed", "{agent}: {t}");
            let message = t["error_message"].as_str().unwrap();
            assert!(message.contains("crashing as asked"), "{agent}: {t}");
            assert!(
                message.len() < 16 * 1024,
                "{agent}: the stderr tail is bounded ({} bytes)",
                message.len()
            );
        }
    })
    .await;
    let rss_after = proc_status(pid, "VmRSS");
    eprintln!("tether RSS {rss_before} kB before the floods, {rss_after} kB after");
    // 6 × ~10 MB went through tether's stderr readers; only a bounded tail is kept.
    assert!(
        rss_after < rss_before + 24 * 1024,
        "tether's RSS grew from {rss_before} kB to {rss_after} kB"
    );
    for dialect in DIALECTS {
        assert_healthy(&d, dialect).await;
    }
}
