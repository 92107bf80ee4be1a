//! The ACP driver against the fake agent binary (`cargo build -p tether-testkit --bin
//! fake-agent` first): sessions, strict resume, streaming, permissions, questions, cancel,
//! crashes, garbage on stdout, start-up failures and process clean-up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use support::{Answer, t, text_of};
use tether_agents::{
    AcpDriver, AgentError, AgentSession, DriverKind, PermissionReply, StartRequest, StopReason,
    TurnOutcome,
};
use tether_proto::Decision;

fn request(dir: &Path, flags: &[&str], resume: Option<&str>) -> StartRequest {
    let args = vec![
        "--dialect".to_owned(),
        "acp".to_owned(),
        "--state-dir".to_owned(),
        dir.display().to_string(),
    ];
    support::fake_request("fake", DriverKind::Acp, args, dir, flags, resume)
}

async fn start(dir: &Path, flags: &[&str], resume: Option<&str>) -> Box<dyn AgentSession> {
    support::start(&AcpDriver::default(), request(dir, flags, resume)).await
}

async fn start_err(
    driver: AcpDriver,
    dir: &Path,
    flags: &[&str],
    resume: Option<&str>,
) -> AgentError {
    support::start_err(&driver, request(dir, flags, resume)).await
}

async fn turn(
    session: &dyn AgentSession,
    text: &str,
    answer: Answer,
) -> (Result<TurnOutcome, AgentError>, Vec<String>) {
    support::turn(session, text, answer, support::describe).await
}

async fn gone(dir: &Path) -> bool {
    support::gone(&dir.display().to_string()).await
}

#[tokio::test]
async fn new_session_remembers_and_resumes_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let id = session.external_id();
    assert!(!id.is_empty());
    let first = text_of(session.as_ref(), "hello").await;
    assert_eq!(first, "echo: hello\nremembers 0: []");
    let second = text_of(session.as_ref(), "again").await;
    assert!(second.contains("remembers 1: [\"hello\"]"), "{second}");
    t(session.shutdown()).await;
    assert!(!session.is_alive());

    let resumed = start(dir.path(), &[], Some(&id)).await;
    assert_eq!(resumed.external_id(), id);
    let third = text_of(resumed.as_ref(), "third").await;
    assert!(
        third.contains("remembers 2: [\"hello\",\"again\"]"),
        "{third}"
    );
    t(resumed.shutdown()).await;
}

#[tokio::test]
async fn strict_resume_failures() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = start_err(AcpDriver::default(), dir.path(), &[], Some("no-such-id")).await;
    assert!(
        matches!(unknown, AgentError::ResumeUnavailable { .. }),
        "{unknown}"
    );

    let session = start(dir.path(), &[], None).await;
    let id = session.external_id();
    text_of(session.as_ref(), "one").await;
    t(session.shutdown()).await;

    let refused = start_err(
        AcpDriver::default(),
        dir.path(),
        &["--refuse-resume"],
        Some(&id),
    )
    .await;
    match refused {
        AgentError::ResumeUnavailable { external_id, .. } => assert_eq!(external_id, id),
        other => panic!("{other}"),
    }

    // The agent accepts the resume but continues under another id: the first turn fails
    // without showing anything, and so does every later one.
    let other = start(dir.path(), &["--resume-other-id"], Some(&id)).await;
    let (outcome, seen) = turn(other.as_ref(), "two", Answer::None).await;
    assert!(
        matches!(outcome, Err(AgentError::ResumeUnavailable { .. })),
        "{outcome:?}"
    );
    assert!(seen.is_empty(), "{seen:?}");
    let (again, _) = turn(other.as_ref(), "three", Answer::None).await;
    assert!(
        matches!(again, Err(AgentError::ResumeUnavailable { .. })),
        "{again:?}"
    );
    t(other.shutdown()).await;
    assert!(gone(dir.path()).await);
}

#[tokio::test]
async fn permissions_are_asked_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let cases = [
        (
            PermissionReply::Decision(Decision::Allow),
            "approval: allowed",
        ),
        (
            PermissionReply::Decision(Decision::AllowAlways),
            "approval: allowed_always",
        ),
        (
            PermissionReply::Decision(Decision::Deny),
            "approval: denied",
        ),
        (PermissionReply::Cancelled, "approval: cancelled"),
    ];
    for (reply, expected) in cases {
        let (outcome, seen) =
            turn(session.as_ref(), "approve ls -l", Answer::Permission(reply)).await;
        let outcome = outcome.expect("turn");
        assert!(outcome.text.starts_with(expected), "{}", outcome.text);
        assert_eq!(seen[0], "tool:ls -l:pending");
        assert_eq!(seen[1], "permission:ls -l:allow,allow_always,deny");
        assert!(seen[2].starts_with("tool_update:"), "{seen:?}");
    }
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
    assert!(
        outcome
            .expect("turn")
            .text
            .starts_with("answer: <declined>")
    );
    t(session.shutdown()).await;
}

#[tokio::test]
async fn cancel_ends_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let (outcome, seen) = turn(session.as_ref(), "stream 50 50", Answer::Cancel).await;
    let outcome = outcome.expect("turn");
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert!(seen.len() < 50, "{seen:?}");

    // A pending permission request is answered "cancelled" by the cancel.
    let (outcome, _) = turn(session.as_ref(), "approve rm it", Answer::Cancel).await;
    assert_eq!(outcome.expect("turn").stop_reason, StopReason::Cancelled);
    support::cancel_a_silent_turn(session.as_ref()).await;
    // Still usable after cancelling.
    let text = text_of(session.as_ref(), "after").await;
    assert!(text.starts_with("echo: after"), "{text}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn crash_mid_turn_reports_the_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    support::crash_mid_turn(session.as_ref(), support::describe).await;
    t(session.shutdown()).await;
    assert!(gone(dir.path()).await);
}

#[tokio::test]
async fn garbage_is_skipped_and_failures_are_agent_errors() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let text = text_of(session.as_ref(), "garbage").await;
    assert!(text.starts_with("garbage done"), "{text}");
    let (outcome, _) = turn(session.as_ref(), "fail", Answer::None).await;
    match outcome {
        Err(e @ AgentError::Agent { .. }) => assert!(e.to_string().contains("fake failure"), "{e}"),
        other => panic!("{other:?}"),
    }
    let text = text_of(session.as_ref(), "still here").await;
    assert!(text.contains("remembers 2"), "{text}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn start_up_failures() {
    let dir = tempfile::tempdir().unwrap();
    let quick = AcpDriver {
        start_timeout: Duration::from_millis(300),
        records: None,
        hosts: None,
    };
    let request = |flags: &[&str]| request(dir.path(), flags, None);
    let arg = dir.path().display().to_string();
    support::start_up_failures(&AcpDriver::default(), &quick, request, &arg).await;
}

#[tokio::test]
async fn shutdown_and_drop_kill_and_reap() {
    let dir = tempfile::tempdir().unwrap();
    let arg = dir.path().display().to_string();
    support::shutdown_reaps(start(dir.path(), &[], None).await, &arg).await;
    support::drop_mid_turn_kills(start(dir.path(), &[], None).await, &arg).await;
}
