//! What every driver does around its own start-up handshake: spawn the agent process with
//! the close report its reader hands on when stdout ends ([`spawn_agent`]), and tear the
//! process down again when the handshake fails ([`finish_start`]).

use std::future::Future;
use std::time::Duration;

use tokio::process::{ChildStdin, ChildStdout};

use crate::driver::{AgentError, StartRequest};
use crate::jsonrpc::{CloseInfo, OnClose};
use crate::process::{AgentProcess, ProcessSpec, Spawned};

/// How long to wait for the exit status and the end of stderr once stdout closed.
pub(crate) const CRASH_REPORT_WAIT: Duration = Duration::from_secs(2);

/// The process of a [`StartRequest`] as configured: command, arguments and environment,
/// in the request's working directory.
pub(crate) fn request_spec(req: &StartRequest) -> ProcessSpec {
    ProcessSpec {
        program: req.spec.command.clone(),
        args: req.spec.args.clone(),
        env: req.spec.env.clone(),
        cwd: req.cwd.clone(),
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
