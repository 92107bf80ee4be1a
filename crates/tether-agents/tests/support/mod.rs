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
            env: BTreeMap::new(),
        },
        cwd: cwd.to_path_buf(),
        model: None,
        resume: resume.map(str::to_owned),
        mcp_servers: Vec::new(),
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
