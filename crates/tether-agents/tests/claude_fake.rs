//! The Claude Code driver against the fake agent's claude stream-json dialect (`cargo
//! build -p tether-testkit --bin fake-agent` first): new sessions, strict resume,
//! approvals, questions, cancel, crashes, failed turns, start-up failures, clean-up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use support::{Answer, t, text_of};
use tether_agents::{
    AgentError, AgentEvent, AgentSession, ClaudeDriver, DriverKind, PermissionReply, StartRequest,
    StopReason, TurnOutcome,
};
use tether_proto::Decision;

/// The fake agent with the real claude arguments (plus the fake's own flags).
fn request(dir: &Path, flags: &[&str], resume: Option<&str>) -> StartRequest {
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-prompt-tool",
        "stdio",
        "--include-partial-messages",
        "--dialect",
        "claude",
        "--state-dir",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.push(dir.join("state").display().to_string());
    support::fake_request("fake-claude", DriverKind::Claude, args, dir, flags, resume)
}

async fn start(dir: &Path, flags: &[&str], resume: Option<&str>) -> Box<dyn AgentSession> {
    support::start(&ClaudeDriver::default(), request(dir, flags, resume)).await
}

async fn start_err(
    driver: ClaudeDriver,
    dir: &Path,
    flags: &[&str],
    resume: Option<&str>,
) -> AgentError {
    support::start_err(&driver, request(dir, flags, resume)).await
}

/// Tool calls with their kind, tool updates with their output.
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
        AgentEvent::ToolCallUpdate { status, detail, .. } => format!(
            "tool_update:{}:{}",
            status.clone().unwrap_or_default(),
            detail
                .as_ref()
                .map(|d| d["output"].clone())
                .unwrap_or_default()
        ),
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
    support::gone(&dir.join("state").display().to_string()).await
}

#[tokio::test]
async fn new_session_streams_remembers_and_resumes_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let id = session.external_id();
    assert_eq!(id.len(), 36, "a uuid chosen by tether: {id}");
    // The fake persists a session under the id it was given with --session-id.
    assert!(dir.path().join("state").read_dir().unwrap().count() > 0);
    let (outcome, seen) = turn(session.as_ref(), "hello", Answer::None).await;
    let outcome = outcome.expect("turn");
    assert_eq!(outcome.text, "echo: hello\nremembers 0: []");
    assert_eq!(seen, ["delta:echo: hello\nremembers 0: []"]);
    assert!(
        outcome
            .usage
            .is_some_and(|u| u.get("input_tokens").is_some())
    );

    let (outcome, seen) = turn(session.as_ref(), "stream 3 10", Answer::None).await;
    let text = outcome.expect("turn").text;
    assert!(text.starts_with("chunk 1 chunk 2 chunk 3 "), "{text}");
    assert!(text.ends_with("remembers 1: [\"hello\"]"), "{text}");
    assert_eq!(seen.len(), 4, "{seen:?}");
    t(session.shutdown()).await;
    assert!(!session.is_alive());

    let resumed = start(dir.path(), &[], Some(&id)).await;
    assert_eq!(resumed.external_id(), id);
    let third = text_of(resumed.as_ref(), "third").await;
    assert!(
        third.ends_with("remembers 2: [\"hello\",\"stream 3 10\"]"),
        "{third}"
    );
    t(resumed.shutdown()).await;
    assert!(gone(dir.path()).await);
}

#[tokio::test]
async fn strict_resume_failures() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = "00000000-0000-4000-8000-000000000000";
    match start_err(ClaudeDriver::default(), dir.path(), &[], Some(unknown)).await {
        AgentError::ResumeUnavailable {
            external_id,
            message,
        } => {
            assert_eq!(external_id, unknown);
            assert!(message.contains("No conversation found"), "{message}");
        }
        other => panic!("{other}"),
    }

    let session = start(dir.path(), &[], None).await;
    let id = session.external_id();
    text_of(session.as_ref(), "one").await;
    t(session.shutdown()).await;

    // Exiting at start for another reason is not taken for a missing conversation.
    match start_err(
        ClaudeDriver::default(),
        dir.path(),
        &["--refuse-resume"],
        Some(&id),
    )
    .await
    {
        AgentError::Spawn { stderr_tail, .. } => {
            assert!(stderr_tail.contains("refusing to resume"), "{stderr_tail}")
        }
        other => panic!("{other}"),
    }

    // claude starts but in another session (the fake offers no get_status, so the first
    // turn's system/init tells): that turn fails before anything of it is shown, the
    // process is killed, and later turns fail the same way.
    let other = start(dir.path(), &["--resume-other-id"], Some(&id)).await;
    assert_eq!(other.external_id(), id);
    let (outcome, seen) = turn(other.as_ref(), "two", Answer::None).await;
    match outcome {
        Err(AgentError::ResumeUnavailable { external_id, .. }) => assert_eq!(external_id, id),
        other => panic!("{other:?}"),
    }
    assert!(seen.is_empty(), "{seen:?}");
    assert!(!other.is_alive());
    let (again, _) = turn(other.as_ref(), "three", Answer::None).await;
    assert!(
        matches!(again, Err(AgentError::ResumeUnavailable { .. })),
        "{again:?}"
    );
    t(other.shutdown()).await;
    assert!(gone(dir.path()).await);

    // The history of the real session is untouched by the failed attempt.
    let resumed = start(dir.path(), &[], Some(&id)).await;
    let text = text_of(resumed.as_ref(), "four").await;
    assert!(text.ends_with("remembers 1: [\"one\"]"), "{text}");
    t(resumed.shutdown()).await;
}

#[tokio::test]
async fn approvals_allow_always_deny() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let cases = [
        (
            Answer::Permission(PermissionReply::Decision(Decision::Allow)),
            "approval: allowed",
            "tool_update:completed:\"ls -l\\n\"",
        ),
        (
            Answer::Permission(PermissionReply::Decision(Decision::AllowAlways)),
            "approval: allowed_always",
            "tool_update:completed:\"ls -l\\n\"",
        ),
        (
            Answer::Permission(PermissionReply::Decision(Decision::Deny)),
            "approval: denied",
            "tool_update:failed:",
        ),
        // Expired / cancelled by the person's side: fail closed.
        (
            Answer::Permission(PermissionReply::Cancelled),
            "approval: denied",
            "tool_update:failed:",
        ),
        (
            Answer::DropPermission,
            "approval: denied",
            "tool_update:failed:",
        ),
    ];
    for (answer, expected, update) in cases {
        let (outcome, seen) = turn(session.as_ref(), "approve ls -l", answer).await;
        let outcome = outcome.expect("turn");
        assert!(outcome.text.starts_with(expected), "{}", outcome.text);
        assert_eq!(seen[0], "tool:Bash: echo ls -l:execute:pending");
        assert_eq!(
            seen[1],
            "permission:Bash: echo ls -l:allow,allow_always,deny"
        );
        assert!(seen[2].starts_with(update), "{seen:?}");
        assert!(
            seen[3].starts_with(&format!("delta:{expected}")),
            "{seen:?}"
        );
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
    assert_eq!(seen[0], "tool:AskUserQuestion:other:pending");
    assert_eq!(seen[1], "question:favourite colour?");
    assert!(seen[2].starts_with("tool_update:completed:"), "{seen:?}");

    let (outcome, seen) = turn(session.as_ref(), "ask name?", Answer::Question(None)).await;
    let text = outcome.expect("turn").text;
    assert!(text.starts_with("answer: <declined>"), "{text}");
    assert!(seen[2].starts_with("tool_update:failed:"), "{seen:?}");
    t(session.shutdown()).await;
}

#[tokio::test]
async fn cancel_ends_the_turn_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let (outcome, seen) = turn(session.as_ref(), "stream 50 50", Answer::Cancel).await;
    let outcome = outcome.expect("turn");
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert!(seen.len() < 10, "{seen:?}");
    assert!(outcome.text.starts_with("chunk 1 "), "{}", outcome.text);

    // A pending permission request is answered by the cancel.
    let (outcome, _) = turn(session.as_ref(), "approve rm it", Answer::Cancel).await;
    assert_eq!(outcome.expect("turn").stop_reason, StopReason::Cancelled);
    support::cancel_a_silent_turn(session.as_ref()).await;
    // Cancelling with no turn running is a no-op.
    t(session.cancel()).await.expect("idle cancel");
    let text = text_of(session.as_ref(), "after").await;
    assert!(text.starts_with("echo: after"), "{text}");
    assert!(text.contains("remembers 3"), "{text}");
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
async fn failed_turns_are_agent_errors_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let session = start(dir.path(), &[], None).await;
    let (outcome, _) = turn(session.as_ref(), "fail", Answer::None).await;
    match outcome {
        Err(AgentError::Agent { message }) => {
            assert!(message.contains("fake failure as asked"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(session.is_alive());
    let text = text_of(session.as_ref(), "garbage").await;
    assert!(text.starts_with("garbage done"), "{text}");
    let (outcome, _) = turn(session.as_ref(), "fail", Answer::None).await;
    assert!(matches!(outcome, Err(AgentError::Agent { .. })));
    // claude exits 1 on end of input after an error result: shutdown is still clean.
    t(session.shutdown()).await;
    assert!(!session.is_alive());
    assert!(gone(dir.path()).await);
}

#[tokio::test]
async fn start_up_failures() {
    let dir = tempfile::tempdir().unwrap();
    let quick = ClaudeDriver {
        start_timeout: Duration::from_millis(300),
        records: None,
    };
    let request = |flags: &[&str]| request(dir.path(), flags, None);
    let arg = dir.path().join("state").display().to_string();
    support::start_up_failures(&ClaudeDriver::default(), &quick, request, &arg).await;
}

#[tokio::test]
async fn drop_mid_turn_kills_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let arg = dir.path().join("state").display().to_string();
    support::drop_mid_turn_kills(start(dir.path(), &[], None).await, &arg).await;
}
