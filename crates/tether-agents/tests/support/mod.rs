//! Shared set-up of the fake-agent driver tests (`acp_fake`, `codex_fake`, `claude_fake`):
//! the time limit, start requests for the fake agent, starting (or failing to start) a
//! session, running one turn while answering what the agent asks, and checking that the
//! agent processes are gone. Each test file supplies only what is particular to its
//! dialect (arguments, how tool calls and permissions are described).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use tether_agents::{
    AgentDriver, AgentError, AgentEvent, AgentSession, AgentSpec, DriverKind, PermissionReply,
    StartRequest, StopReason, TurnOutcome,
};
use tokio::sync::mpsc;

pub const LIMIT: Duration = Duration::from_secs(20);

/// `f`, or a panic after [`LIMIT`].
pub async fn t<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f).await.expect("timed out")
}

/// A start request running the fake agent with `args` then `flags`, in `cwd`.
pub fn fake_request(
    name: &str,
    driver: DriverKind,
    args: Vec<String>,
    cwd: &Path,
    flags: &[&str],
    resume: Option<&str>,
) -> StartRequest {
    let mut args = args;
    args.extend(flags.iter().map(|f| f.to_string()));
    StartRequest {
        spec: AgentSpec {
            name: name.to_owned(),
            driver,
            command: tether_testkit::bin_path("fake-agent").display().to_string(),
            args,
            pass_env: Vec::new(),
            env: BTreeMap::new(),
        },
        cwd: cwd.to_path_buf(),
        model: None,
        resume: resume.map(str::to_owned),
        mcp_servers: Vec::new(),
        ceiling: None,
    }
}

/// Starts a session; panics if that fails.
pub async fn start(driver: &dyn AgentDriver, req: StartRequest) -> Box<dyn AgentSession> {
    t(driver.start(req)).await.expect("start")
}

/// The error of a start that must fail.
pub async fn start_err(driver: &dyn AgentDriver, req: StartRequest) -> AgentError {
    match t(driver.start(req)).await {
        Ok(s) => panic!("started {} unexpectedly", s.external_id()),
        Err(e) => e,
    }
}

/// How the test answers what the agent asks during a turn.
#[derive(Clone, Copy)]
pub enum Answer {
    Permission(PermissionReply),
    /// Drop the permission request's reply sender.
    DropPermission,
    Question(Option<&'static str>),
    /// Call `cancel` on the first event.
    Cancel,
    None,
}

/// Describes an event for the test's assertions.
pub type Describe = fn(&AgentEvent) -> String;

/// The description of an event, with tool calls and permissions in their shortest form
/// (`tool:<title>:<status>`, `tool_update:<status>`, `permission:<title>:<options>`).
pub fn describe(event: &AgentEvent) -> String {
    match event {
        AgentEvent::MessageDelta(d) => format!("delta:{d}"),
        AgentEvent::ThoughtDelta(d) => format!("thought:{d}"),
        AgentEvent::ToolCall { title, status, .. } => {
            format!("tool:{title}:{}", status.clone().unwrap_or_default())
        }
        AgentEvent::ToolCallUpdate { status, .. } => {
            format!("tool_update:{}", status.clone().unwrap_or_default())
        }
        AgentEvent::Permission(p) => {
            let options: Vec<&str> = p.options.iter().map(|d| d.as_str()).collect();
            format!("permission:{}:{}", p.title, options.join(","))
        }
        AgentEvent::Question(q) => format!("question:{}", q.prompt),
        AgentEvent::Usage(u) => format!("usage:{}", u.tokens.total()),
        AgentEvent::Window(w) => format!("window:{}:{}", w.window, w.used_percent),
    }
}

/// Runs one turn, answering with `answer`; the result and a description of every event.
/// Permission requests that are not answered are held until the turn ends.
pub async fn turn(
    session: &dyn AgentSession,
    text: &str,
    answer: Answer,
    describe: Describe,
) -> (Result<TurnOutcome, AgentError>, Vec<String>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let collect = async {
        let mut seen = Vec::new();
        let mut held = Vec::new();
        while let Some(event) = rx.recv().await {
            if matches!(event, AgentEvent::Usage(_) | AgentEvent::Window(_)) {
                // Usage is checked by the tests that ask for it, not in event lists.
                continue;
            }
            seen.push(describe(&event));
            match event {
                AgentEvent::Permission(p) => match answer {
                    Answer::Permission(r) => {
                        let _ = p.reply.send(r);
                    }
                    Answer::DropPermission => drop(p.reply),
                    _ => held.push(p.reply),
                },
                AgentEvent::Question(q) => {
                    if let Answer::Question(a) = answer {
                        let _ = q.reply.send(a.map(str::to_owned));
                    }
                }
                _ => {}
            }
            if matches!(answer, Answer::Cancel) && seen.len() == 1 {
                t(session.cancel()).await.expect("cancel");
            }
        }
        drop(held);
        seen
    };
    let (outcome, seen) = t(async { tokio::join!(session.prompt(text, tx), collect) }).await;
    (outcome, seen)
}

/// The text of a turn that must end normally.
pub async fn text_of(session: &dyn AgentSession, text: &str) -> String {
    let (outcome, _) = turn(session, text, Answer::None, describe).await;
    let outcome = outcome.expect("turn");
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    outcome.text
}

/// Processes whose command line contains `arg` (zombies included).
pub fn pids_with(arg: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits (up to 5 s) until no process has `arg` on its command line.
pub async fn gone(arg: &str) -> bool {
    for _ in 0..100 {
        if pids_with(arg).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The fake crashes mid-turn when asked (`crash`: exit status 3, "crashing as asked" on
/// stderr): the turn fails as [`AgentError::Crashed`] with the status and the stderr tail,
/// the session is dead, and the next turn fails the same way. The crashing turn's events.
pub async fn crash_mid_turn(session: &dyn AgentSession, describe: Describe) -> Vec<String> {
    let (outcome, seen) = turn(session, "crash", Answer::None, describe).await;
    match outcome {
        Err(AgentError::Crashed {
            status,
            stderr_tail,
        }) => {
            assert!(status.contains('3'), "{status}");
            assert!(stderr_tail.contains("crashing as asked"), "{stderr_tail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!session.is_alive());
    let (again, _) = turn(session, "hello", Answer::None, describe).await;
    assert!(
        matches!(again, Err(AgentError::Crashed { .. })),
        "{again:?}"
    );
    seen
}

/// Start-up failures: an agent that exits on start is a spawn error with its stderr tail;
/// one that never answers `initialize` times out (with `quick`'s short start timeout) and
/// is not left behind (`process_arg` is on its command line); a missing binary is a spawn
/// error naming it. `request(flags)` is the fake agent's start request.
pub async fn start_up_failures(
    default: &dyn AgentDriver,
    quick: &dyn AgentDriver,
    request: impl Fn(&[&str]) -> StartRequest,
    process_arg: &str,
) {
    match start_err(default, request(&["--exit-on-start"])).await {
        AgentError::Spawn { stderr_tail, .. } => {
            assert!(stderr_tail.contains("exiting on start"), "{stderr_tail}")
        }
        other => panic!("{other}"),
    }

    match start_err(quick, request(&["--no-initialize-reply"])).await {
        AgentError::Timeout { what, .. } => assert_eq!(what, "initialize"),
        other => panic!("{other}"),
    }
    assert!(gone(process_arg).await, "process left behind");

    let mut missing = request(&[]);
    missing.spec.command = missing.cwd.join("no-such-agent").display().to_string();
    match t(default.start(missing)).await {
        Err(AgentError::Spawn { message, .. }) => assert!(message.contains("no-such-agent")),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("started a missing binary"),
    }
}

/// Shutting a live session down ends its process and reaps it (`process_arg` is on the
/// process's command line).
pub async fn shutdown_reaps(session: Box<dyn AgentSession>, process_arg: &str) {
    assert_eq!(pids_with(process_arg).len(), 1);
    assert!(session.is_alive());
    t(session.shutdown()).await;
    assert!(!session.is_alive());
    assert!(pids_with(process_arg).is_empty(), "not reaped");
}

/// Dropping a session in the middle of a turn (the fake hangs on `hang`) kills its process
/// group.
pub async fn drop_mid_turn_kills(session: Box<dyn AgentSession>, process_arg: &str) {
    assert_eq!(pids_with(process_arg).len(), 1);
    let (tx, _rx) = mpsc::unbounded_channel();
    let _ = tokio::time::timeout(Duration::from_millis(200), session.prompt("hang", tx)).await;
    assert_eq!(pids_with(process_arg).len(), 1);
    drop(session);
    assert!(gone(process_arg).await, "not killed on drop");
}

/// Cancelling a turn in which the agent sends nothing at all (the fake hangs on `hang`)
/// ends it as cancelled.
pub async fn cancel_a_silent_turn(session: &dyn AgentSession) {
    let (tx, _rx) = mpsc::unbounded_channel();
    let cancel_later = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        t(session.cancel()).await.expect("cancel");
    };
    let (outcome, ()) = t(async { tokio::join!(session.prompt("hang", tx), cancel_later) }).await;
    assert_eq!(outcome.expect("turn").stop_reason, StopReason::Cancelled);
}
