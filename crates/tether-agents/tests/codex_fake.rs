//! The Codex app-server driver against the fake agent's codex dialect (`cargo build -p
//! tether-testkit --bin fake-agent` first): threads, strict resume, streaming, approvals,
//! questions, cancel, crashes, failures, start-up failures and process clean-up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use support::{Answer, t, text_of};
use tether_agents::{
    AgentError, AgentEvent, AgentSession, CodexDriver, DriverKind, PermissionReply, StartRequest,
    StopReason, TurnOutcome,
};
use tether_proto::Decision;

fn request(dir: &Path, flags: &[&str], resume: Option<&str>) -> StartRequest {
    let args = vec![
        "app-server".to_owned(),
        "--dialect".to_owned(),
        "codex".to_owned(),
        "--state-dir".to_owned(),
        dir.display().to_string(),
    ];
    support::fake_request("fake-codex", DriverKind::Codex, args, dir, flags, resume)
}

async fn start(dir: &Path, flags: &[&str], resume: Option<&str>) -> Box<dyn AgentSession> {
    support::start(&CodexDriver::default(), request(dir, flags, resume)).await
}

async fn start_err(
    driver: CodexDriver,
    dir: &Path,
    flags: &[&str],
    resume: Option<&str>,
) -> AgentError {
    support::start_err(&driver, request(dir, flags, resume)).await
}

/// Tool calls with their kind and output, permissions with their kind.
fn describe(event: &AgentEvent) -> String {
    match event {
        AgentEvent::ToolCall {
            title,
            kind,
            status,
            ..
        } => format!(
            "tool:{title}:{}:{}",
            kind.clone().unwrap_or_default(),
            status.clone().unwrap_or_default()
        ),
        AgentEvent::ToolCallUpdate { status, detail, .. } => {
            let output = detail
                .as_ref()
                .and_then(|d| d.get("aggregatedOutput"))
                .and_then(|o| o.as_str())
                .unwrap_or_default()
                .trim()
                .to_owned();
            format!(
                "tool_update:{}:{output}",
                status.clone().unwrap_or_default()
            )
        }
        AgentEvent::Permission(p) => {
            let options: Vec<&str> = p.options.iter().map(|d| d.as_str()).collect();
            format!(
                "permission:{}:{}:{}",
                p.title,
                p.kind.clone().unwrap_or_default(),
                options.join(",")
            )
        }
        other => support::describe(other),
    }
}

async fn turn(
    session: &dyn AgentSession,
    text: &str,
    answer: Answer,
) -> (Result<TurnOutcome, AgentError>, Vec<String>) {
    support::turn(session, text, answer, describe).await
}

async fn gone(dir: &Path) -> bool {
    support::gone(&dir.display().to_string()).await
}

#[tokio::test]
async fn new_thread_remembers_streams_and_resumes_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let id = session.external_id();
    assert!(!id.is_empty());
    let first = text_of(session.as_ref(), "hello").await;
    assert_eq!(first, "echo: hello\nremembers 0: []");
    let (outcome, seen) = turn(session.as_ref(), "stream 3 10", Answer::None).await;
    let outcome = outcome.expect("turn");
    assert_eq!(
        seen,
        [
            "delta:chunk 1 ",
            "delta:chunk 2 ",
            "delta:chunk 3 ",
            "delta:\nremembers 1: [\"hello\"]"
        ]
    );
    assert_eq!(
        outcome.text,
        "chunk 1 chunk 2 chunk 3 \nremembers 1: [\"hello\"]"
    );
    t(session.shutdown()).await;
    assert!(!session.is_alive());

    let resumed = start(dir.path(), &[], Some(&id)).await;
    assert_eq!(resumed.external_id(), id);
    let third = text_of(resumed.as_ref(), "third").await;
    assert!(
        third.contains("remembers 2: [\"hello\",\"stream 3 10\"]"),
        "{third}"
    );
    t(resumed.shutdown()).await;
    assert!(gone(dir.path()).await);
}

#[tokio::test]
async fn strict_resume_failures() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = start_err(CodexDriver::default(), dir.path(), &[], Some("no-such-id")).await;
    assert!(
        matches!(unknown, AgentError::ResumeUnavailable { .. }),
        "{unknown}"
    );

    let session = start(dir.path(), &[], None).await;
    let id = session.external_id();
    text_of(session.as_ref(), "one").await;
    t(session.shutdown()).await;

    for flag in ["--refuse-resume", "--resume-other-id"] {
        match start_err(CodexDriver::default(), dir.path(), &[flag], Some(&id)).await {
            AgentError::ResumeUnavailable { external_id, .. } => assert_eq!(external_id, id),
            other => panic!("{flag}: {other}"),
        }
    }
    assert!(gone(dir.path()).await, "process left behind");

    // The thread itself is intact: a plain resume still continues it.
    let resumed = start(dir.path(), &[], Some(&id)).await;
    let text = text_of(resumed.as_ref(), "two").await;
    assert!(text.contains("remembers 1: [\"one\"]"), "{text}");
    t(resumed.shutdown()).await;
}

#[tokio::test]
async fn approvals_are_asked_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let cases = [
        (
            PermissionReply::Decision(Decision::Allow),
            "approval: allowed",
            "tool_update:completed:ls -l",
        ),
        (
            PermissionReply::Decision(Decision::AllowAlways),
            "approval: allowed_always",
            "tool_update:completed:ls -l",
        ),
        (
            PermissionReply::Decision(Decision::Deny),
            "approval: denied",
            "tool_update:declined:",
        ),
    ];
    for (reply, expected, update) in cases {
        let (outcome, seen) =
            turn(session.as_ref(), "approve ls -l", Answer::Permission(reply)).await;
        let outcome = outcome.expect("turn");
        assert_eq!(outcome.stop_reason, StopReason::EndTurn);
        assert!(outcome.text.starts_with(expected), "{}", outcome.text);
        assert_eq!(seen[0], "tool:echo ls -l:execute:in_progress");
        assert_eq!(
            seen[1],
            "permission:echo ls -l:execute:allow,allow_always,deny"
        );
        assert_eq!(seen[2], update, "{seen:?}");
    }
    // Answering "cancelled" is Codex's "cancel": the turn is interrupted.
    let (outcome, _) = turn(
        session.as_ref(),
        "approve rm it",
        Answer::Permission(PermissionReply::Cancelled),
    )
    .await;
    assert_eq!(outcome.expect("turn").stop_reason, StopReason::Cancelled);
    let text = text_of(session.as_ref(), "after").await;
    assert!(text.starts_with("echo: after"), "{text}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn questions_are_asked_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let (outcome, seen) = turn(
        session.as_ref(),
        "ask favourite colour?",
        Answer::Question(Some("blue")),
    )
    .await;
    assert!(outcome.expect("turn").text.starts_with("answer: blue"));
    assert_eq!(seen[0], "question:favourite colour?");
    let (outcome, _) = turn(session.as_ref(), "ask name?", Answer::Question(None)).await;
    let text = outcome.expect("turn").text;
    assert!(text.starts_with("answer: <declined>"), "{text}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn cancel_interrupts_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let (outcome, seen) = turn(session.as_ref(), "stream 50 50", Answer::Cancel).await;
    let outcome = outcome.expect("turn");
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert!(seen.len() < 10, "{seen:?}");

    // A pending approval is answered "cancel" and the turn ends interrupted.
    let (outcome, seen) = turn(session.as_ref(), "approve rm it", Answer::Cancel).await;
    assert_eq!(outcome.expect("turn").stop_reason, StopReason::Cancelled);
    assert_eq!(seen[0], "tool:echo rm it:execute:in_progress");
    support::cancel_a_silent_turn(session.as_ref()).await;
    // Cancelling while idle is harmless, and the thread is still usable.
    t(session.cancel()).await.expect("idle cancel");
    let text = text_of(session.as_ref(), "after").await;
    assert!(text.starts_with("echo: after"), "{text}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn crash_mid_turn_reports_the_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let seen = support::crash_mid_turn(session.as_ref(), describe).await;
    assert_eq!(seen, ["delta:about to crash"]);
    t(session.shutdown()).await;
    assert!(gone(dir.path()).await);
}

#[tokio::test]
async fn failed_turns_are_agent_errors_and_garbage_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let (outcome, _) = turn(session.as_ref(), "fail", Answer::None).await;
    match outcome {
        Err(AgentError::Agent { message }) => assert_eq!(message, "fake failure as asked"),
        other => panic!("{other:?}"),
    }
    let text = text_of(session.as_ref(), "garbage").await;
    assert!(text.starts_with("garbage done"), "{text}");
    let text = text_of(session.as_ref(), "still here").await;
    assert!(text.contains("remembers 2"), "{text}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn start_up_failures() {
    let dir = tempfile::tempdir().unwrap();
    let quick = CodexDriver {
        start_timeout: Duration::from_millis(300),
        records: None,
        hosts: None,
    };
    let request = |flags: &[&str]| request(dir.path(), flags, None);
    let arg = dir.path().display().to_string();
    support::start_up_failures(&CodexDriver::default(), &quick, request, &arg).await;
}

#[tokio::test]
async fn shutdown_and_drop_kill_and_reap() {
    let dir = tempfile::tempdir().unwrap();
    let arg = dir.path().display().to_string();
    support::shutdown_reaps(start(dir.path(), &[], None).await, &arg).await;
    support::drop_mid_turn_kills(start(dir.path(), &[], None).await, &arg).await;
}
