//! What every driver does around its own start-up handshake: spawn the agent process with
//! the close report its reader hands on when stdout ends ([`spawn_agent`]), and tear the
//! process down again when the handshake fails ([`finish_start`]); the start-up requests
//! and their errors of the JSON-RPC drivers ([`Handshake`]).

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{ChildStdin, ChildStdout};

use crate::driver::{AgentError, StartRequest};
use crate::groups::GroupRecords;
use crate::jsonrpc::{CloseInfo, Connection, Handler, OnClose, Options, RpcError};
use crate::process::{AgentProcess, ProcessSpec, Spawned};

/// How long to wait for the exit status and the end of stderr once stdout closed.
pub(crate) const CRASH_REPORT_WAIT: Duration = Duration::from_secs(2);

/// The process of a [`StartRequest`] as configured: command, arguments and environment,
/// in the request's working directory, its group recorded in `records`.
pub(crate) fn request_spec(req: &StartRequest, records: &Option<GroupRecords>) -> ProcessSpec {
    ProcessSpec {
        ceiling: req.ceiling.clone(),
        agent: req.spec.name.clone(),
        program: req.spec.command.clone(),
        args: req.spec.args.clone(),
        pass_env: req.spec.pass_env.clone(),
        env: req.spec.env.clone(),
        cwd: req.cwd.clone(),
        records: records.clone(),
    }
}

/// A spawned agent: the process, its pipes, and the close report for the reader.
pub(crate) struct Launched {
    pub process: AgentProcess,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    /// Yields the exit status and stderr tail (waiting up to [`CRASH_REPORT_WAIT`] for
    /// both), after handing them to the `on_closed` hook of [`spawn_agent`].
    pub on_close: OnClose,
}

/// Spawns `spec`; `on_closed` sees the close report before the reader hands it on.
pub(crate) fn spawn_agent(
    spec: &ProcessSpec,
    on_closed: impl FnOnce(&CloseInfo) + Send + 'static,
) -> Result<Launched, AgentError> {
    let Spawned {
        process,
        stdin,
        stdout,
    } = AgentProcess::spawn(spec)?;
    let report = process.crash_reporter(CRASH_REPORT_WAIT);
    let on_close: OnClose = Box::new(move || {
        Box::pin(async move {
            let (status, stderr_tail) = report.await;
            let info = CloseInfo {
                status,
                stderr_tail,
            };
            on_closed(&info);
            info
        })
    });
    Ok(Launched {
        process,
        stdin,
        stdout,
        on_close,
    })
}

/// Spawns a JSON-RPC agent (ACP, Codex) and connects to it; `handler` gets what it sends,
/// `on_closed` sees the close report (see [`spawn_agent`]).
pub(crate) fn spawn_rpc(
    spec: &ProcessSpec,
    options: Options,
    handler: Handler,
    on_closed: impl FnOnce(&CloseInfo) + Send + 'static,
) -> Result<(AgentProcess, Connection), AgentError> {
    let Launched {
        process,
        stdin,
        stdout,
        on_close,
    } = spawn_agent(spec, on_closed)?;
    let conn = Connection::spawn(stdout, stdin, options, handler, on_close);
    Ok((process, conn))
}

/// The result of a start-up handshake; on failure first closes the agent's stdin (`close`)
/// and shuts the process down.
pub(crate) async fn finish_start<T>(
    handshake: Result<T, AgentError>,
    close: impl Future<Output = ()>,
    process: &AgentProcess,
) -> Result<T, AgentError> {
    if handshake.is_err() {
        close.await;
        process.shutdown().await;
    }
    handshake
}

/// "Timed out during `what`" with the stderr tail so far.
pub(crate) fn start_timeout(what: &str, limit: Duration, process: &AgentProcess) -> AgentError {
    AgentError::Timeout {
        what: what.to_owned(),
        secs: limit.as_secs_f64().ceil() as u64,
        stderr_tail: process.stderr_tail().snapshot(),
    }
}

/// The agent could not be started, with the stderr tail so far.
pub(crate) fn spawn_failure(message: String, process: &AgentProcess) -> AgentError {
    AgentError::Spawn {
        message,
        stderr_tail: process.stderr_tail().snapshot(),
    }
}

/// A start-up request over JSON-RPC that failed.
pub(crate) enum StepError {
    Rpc(RpcError),
    Timeout(AgentError),
}

/// The start-up requests of the JSON-RPC drivers (ACP, Codex), each bounded by `timeout`.
pub(crate) struct Handshake<'a> {
    pub conn: &'a Connection,
    pub process: &'a AgentProcess,
    pub timeout: Duration,
}

impl Handshake<'_> {
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, StepError> {
        match tokio::time::timeout(self.timeout, self.conn.request(method, params)).await {
            Ok(reply) => reply.map_err(StepError::Rpc),
            Err(_) => Err(StepError::Timeout(start_timeout(
                method,
                self.timeout,
                self.process,
            ))),
        }
    }

    /// Errors before a session exists: the agent could not be started (a refused request
    /// after `initialize` is the agent's error).
    pub fn start_error(&self, method: &str, e: StepError) -> AgentError {
        match e {
            StepError::Timeout(e) => e,
            StepError::Rpc(RpcError::Closed(info)) => AgentError::Spawn {
                message: format!("agent exited during {method} ({})", info.status),
                stderr_tail: info.stderr_tail,
            },
            StepError::Rpc(RpcError::Remote { message, .. }) if method == "initialize" => {
                spawn_failure(format!("initialize failed: {message}"), self.process)
            }
            // The agent's own reason (its error's `data`, its last stderr lines) goes
            // with the message: "Internal error" alone tells the person nothing.
            StepError::Rpc(RpcError::Remote { message, data, .. }) => AgentError::Agent {
                message: format!(
                    "{method} failed: {message}{}{}",
                    data.as_ref()
                        .filter(|d| !d.is_null())
                        .map_or_else(String::new, |d| format!(" ({})", brief(d))),
                    stderr_brief(&self.process.stderr_tail().snapshot()),
                ),
            },
            StepError::Rpc(RpcError::Write(message)) => spawn_failure(message, self.process),
        }
    }
}

/// A JSON value as short text (a string as is), at most 500 characters.
fn brief(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.chars().take(500).collect()
}

/// The last few stderr lines, as `; stderr: …` (nothing when there are none).
fn stderr_brief(tail: &str) -> String {
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = &lines[lines.len().saturating_sub(5)..];
    if last.is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", last.join(" | "))
    }
}

/// Why a strict resume request (`method`) failed, for [`AgentError::ResumeUnavailable`].
pub(crate) fn resume_failure(method: &str, e: RpcError) -> String {
    match e {
        // The agent's details (its error's `data`: gemini says "No previous sessions
        // found for this project." there) go with its message.
        RpcError::Remote { message, data, .. } => match data.as_ref().filter(|d| !d.is_null()) {
            Some(d) => format!("{message} ({})", brief(d)),
            None => message,
        },
        RpcError::Write(message) => message,
        RpcError::Closed(info) => format!(
            "agent exited during {method} ({}); stderr: {}",
            info.status,
            info.stderr_tail.trim_end()
        ),
    }
}
