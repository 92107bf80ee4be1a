//! Child-process supervision for agent CLIs: spawn in an own process group with an explicit
//! environment (see [`crate::env`]) and piped stdio, with the parent-death signal (see
//! [`crate::spawner`]) and a record of the group (see [`crate::groups`]); keep a bounded
//! tail of stderr, publish the exit status, shut down gracefully (stdin closed → grace →
//! SIGTERM → SIGKILL to the whole group) and always reap. Dropping an [`AgentProcess`]
//! kills its group.
//!
//! Knows nothing about protocols: the caller gets stdin/stdout and speaks over them.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{KillOnDrop, ProcessGroup, TokioChildWrapper, TokioCommandWrap};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, watch};

use crate::driver::AgentError;
use crate::groups::GroupRecords;

/// How long [`AgentProcess::shutdown`] waits after closing stdin and after SIGTERM.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(500);

const TAIL_MAX_LINES: usize = 40;
const TAIL_MAX_BYTES: usize = 8 * 1024;
const TAIL_MAX_LINE: usize = 1024;

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The configured agent name (for messages).
    pub agent: String,
    pub program: String,
    pub args: Vec<String>,
    /// Variables passed from tether's environment when set (on top of
    /// [`crate::env::BASE_ENV`]).
    pub pass_env: Vec<String>,
    /// Set on top of the passed variables.
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Where the process group is recorded while it runs (none: not recorded).
    pub records: Option<GroupRecords>,
    /// The ceiling the process takes a slot of until it is reaped (none: uncounted).
    pub ceiling: Option<crate::ProcessCeiling>,
}

impl ProcessSpec {
    /// The complete environment of the process.
    pub fn environment(&self) -> BTreeMap<OsString, OsString> {
        crate::env::agent_env(&self.pass_env, &self.env)
    }
}

/// How the process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Human-readable, e.g. `exit status: 3` or `signal: 9 (SIGKILL)`.
    pub description: String,
}

impl ExitInfo {
    fn from_status(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        ExitInfo {
            code: status.code(),
            signal: status.signal(),
            description: status.to_string(),
        }
    }

    fn unknown(why: &str) -> Self {
        ExitInfo {
            code: None,
            signal: None,
            description: why.to_owned(),
        }
    }
}

/// The last lines the process wrote to stderr (at most ~40 lines / 8 KiB).
#[derive(Debug, Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<TailBuf>>,
    done: watch::Receiver<bool>,
}

#[derive(Debug, Default)]
struct TailBuf {
    lines: VecDeque<String>,
    bytes: usize,
}

impl TailBuf {
    fn push(&mut self, raw: &[u8]) {
        let raw = &raw[..raw.len().min(TAIL_MAX_LINE)];
        let line = String::from_utf8_lossy(raw)
            .trim_end_matches(['\r', '\n'])
            .to_owned();
        // Escaped: a CR or an escape sequence from an agent must not forge or hide log
        // lines (issue 24 S10).
        tracing::debug!(target: "tether_agents::stderr", "{}", line.escape_debug());
        self.bytes += line.len() + 1;
        self.lines.push_back(line);
        while self.lines.len() > TAIL_MAX_LINES || self.bytes > TAIL_MAX_BYTES {
            match self.lines.pop_front() {
                Some(old) => self.bytes -= old.len() + 1,
                None => break,
            }
        }
    }
}

impl StderrTail {
    /// The retained lines, newline-joined.
    pub fn snapshot(&self) -> String {
        let buf = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        buf.lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits (at most `limit`) until stderr reached end of file, then snapshots.
    pub async fn settled(&self, limit: Duration) -> String {
        let mut done = self.done.clone();
        let _ = tokio::time::timeout(limit, done.wait_for(|d| *d)).await;
        self.snapshot()
    }
}

/// Reads stderr to the end into the tail, in chunks (a line without newline is capped).
fn collect_stderr(stderr: impl AsyncRead + Unpin + Send + 'static) -> StderrTail {
    let lines = Arc::new(Mutex::new(TailBuf::default()));
    let (done_tx, done) = watch::channel(false);
    let tail = StderrTail {
        lines: Arc::clone(&lines),
        done,
    };
    tokio::spawn(async move {
        let mut stderr = stderr;
        let mut chunk = [0u8; 4096];
        let mut partial: Vec<u8> = Vec::new();
        let push = |line: &[u8]| lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        loop {
            let n = match stderr.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut rest = &chunk[..n];
            while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
                if partial.len() < TAIL_MAX_LINE {
                    partial.extend_from_slice(&rest[..pos]);
                }
                push(&partial);
                partial.clear();
                rest = &rest[pos + 1..];
            }
            if partial.len() < TAIL_MAX_LINE {
                partial.extend_from_slice(rest);
            }
        }
        if !partial.is_empty() {
            push(&partial);
        }
        let _ = done_tx.send(true);
    });
    tail
}

/// A spawned process plus the pipes the caller talks over.
#[derive(Debug)]
pub struct Spawned {
    pub process: AgentProcess,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
}

/// A running (or ended) agent process. Dropping it kills the process group.
#[derive(Debug)]
pub struct AgentProcess {
    program: String,
    pid: Option<u32>,
    tail: StderrTail,
    exit: watch::Receiver<Option<ExitInfo>>,
    signals: mpsc::UnboundedSender<i32>,
}

impl AgentProcess {
    /// Spawns `spec` in a new process group. Fails with [`AgentError::Spawn`].
    pub fn spawn(spec: &ProcessSpec) -> Result<Spawned, AgentError> {
        let spawn_error = |message: String| AgentError::Spawn {
            message,
            stderr_tail: String::new(),
        };
        let env = spec.environment();
        let path_var = env.get(OsStr::new("PATH")).cloned().unwrap_or_default();
        if find_command(&spec.program, &path_var, &spec.cwd).is_none() {
            return Err(spawn_error(not_found(spec)));
        }
        let slot = spec.ceiling.as_ref().map(|c| c.take()).transpose()?;
        let job = {
            let spec = spec.clone();
            move || {
                let mut cmd = TokioCommandWrap::with_new(&spec.program, |cmd| {
                    cmd.args(&spec.args)
                        .current_dir(&spec.cwd)
                        .env_clear()
                        .envs(&env)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped());
                    crate::spawner::die_with_parent(cmd);
                });
                cmd.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
                cmd.spawn()
            }
        };
        let spawned = crate::spawner::on_spawner_thread(job)
            .unwrap_or_else(|| Err(std::io::Error::other("the agent spawner failed")));
        let mut child = spawned.map_err(|e| {
            spawn_error(match e.kind() {
                std::io::ErrorKind::NotFound => not_found(spec),
                _ => format!("{}: cannot start `{}`: {e}", spec.agent, spec.program),
            })
        })?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) = (
            child.stdin().take(),
            child.stdout().take(),
            child.stderr().take(),
        ) else {
            let _ = child.start_kill();
            return Err(spawn_error("child pipes missing".to_owned()));
        };
        let records = match (&spec.records, pid) {
            (Some(records), Some(pid)) => {
                records.record(pid, &spec.program);
                Some((records.clone(), pid))
            }
            _ => None,
        };
        let tail = collect_stderr(stderr);
        let (exit_tx, exit) = watch::channel(None);
        let (signals, signal_rx) = mpsc::unbounded_channel();
        tokio::spawn(supervise(
            ChildGuard {
                child,
                reaped: false,
                records,
                _slot: slot,
            },
            signal_rx,
            exit_tx,
        ));
        tracing::debug!(program = %spec.program, ?pid, "agent process spawned");
        Ok(Spawned {
            process: AgentProcess {
                program: spec.program.clone(),
                pid,
                tail,
                exit,
                signals,
            },
            stdin,
            stdout,
        })
    }

    /// The process id (also the process group id).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    pub fn program(&self) -> &str {
        &self.program
    }

    /// The stderr tail collector (cheap to clone).
    pub fn stderr_tail(&self) -> &StderrTail {
        &self.tail
    }

    /// A receiver that turns `Some` once the process has ended and been reaped.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitInfo>> {
        self.exit.clone()
    }

    /// `Some` once the process has ended.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.exit.borrow().clone()
    }

    pub fn is_alive(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// Sends `signal` to the whole process group (no-op once it has ended).
    pub fn signal_group(&self, signal: i32) {
        let _ = self.signals.send(signal);
    }

    /// Waits until the process has ended and been reaped.
    pub async fn wait(&self) -> ExitInfo {
        wait_exit(self.exit.clone()).await
    }

    /// The status and stderr tail to report after stdout closed: waits up to `limit` for the
    /// exit and for stderr to end.
    pub async fn crash_report(&self, limit: Duration) -> (String, String) {
        crash_report(self.exit.clone(), self.tail.clone(), limit).await
    }

    /// Like [`AgentProcess::crash_report`], but usable without borrowing the process.
    pub fn crash_reporter(
        &self,
        limit: Duration,
    ) -> impl std::future::Future<Output = (String, String)> + Send + 'static {
        crash_report(self.exit.clone(), self.tail.clone(), limit)
    }

    /// Graceful stop with [`DEFAULT_GRACE`]; see [`AgentProcess::shutdown_with`].
    pub async fn shutdown(&self) -> ExitInfo {
        self.shutdown_with(DEFAULT_GRACE).await
    }

    /// Expects the caller to have closed stdin already. Waits `grace` for the process to
    /// exit, then SIGTERMs the group, waits `grace` again, then SIGKILLs the group; returns
    /// once the process has been reaped.
    pub async fn shutdown_with(&self, grace: Duration) -> ExitInfo {
        for signal in [libc::SIGTERM, libc::SIGKILL] {
            if let Ok(info) = tokio::time::timeout(grace, self.wait()).await {
                return info;
            }
            tracing::debug!(program = %self.program, signal, "signalling agent process group");
            self.signal_group(signal);
        }
        self.wait().await
    }
}

async fn wait_exit(mut exit: watch::Receiver<Option<ExitInfo>>) -> ExitInfo {
    match exit.wait_for(Option::is_some).await {
        Ok(info) => info.clone().unwrap_or_else(|| ExitInfo::unknown("exited")),
        Err(_) => ExitInfo::unknown("supervisor gone"),
    }
}

async fn crash_report(
    exit: watch::Receiver<Option<ExitInfo>>,
    tail: StderrTail,
    limit: Duration,
) -> (String, String) {
    let status = match tokio::time::timeout(limit, wait_exit(exit)).await {
        Ok(info) => info.description,
        Err(_) => "stdout closed, process still running".to_owned(),
    };
    (status, tail.settled(limit).await)
}

/// Owns the child; kills its group if dropped before the child was reaped (e.g. when the
/// runtime shuts down).
struct ChildGuard {
    child: Box<dyn TokioChildWrapper>,
    reaped: bool,
    /// Where the group is recorded, and its id.
    records: Option<(GroupRecords, u32)>,
    /// Given back when the guard goes, after the reap.
    _slot: Option<crate::ProcessSlot>,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.signal(libc::SIGKILL);
        }
    }
}

/// "codex: command not found on PATH — install it or set `[agents.codex] command` (see
/// `tether doctor`)".
fn not_found(spec: &ProcessSpec) -> String {
    let place = if spec.program.contains('/') {
        "not found or not executable"
    } else {
        "command not found on PATH"
    };
    format!(
        "{}: {place} — install it or set `[agents.{}] command` (see `tether doctor`)",
        spec.program, spec.agent
    )
}

/// The file `command` names, as the process would be started in `cwd`: `command` itself
/// when it contains a `/`, else the first executable of that name on `path_var`
/// (relative entries are relative to `cwd`).
pub fn find_command(command: &str, path_var: &OsStr, cwd: &std::path::Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = cwd.join(command);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path_var)
        .map(|dir| cwd.join(dir).join(command))
        .find(|p| executable(p))
}

/// Waits for the child while relaying signals; when the owner goes away, kills the group.
/// After the leader exits, whatever is left of the group is killed too.
async fn supervise(
    mut guard: ChildGuard,
    mut signals: mpsc::UnboundedReceiver<i32>,
    exit_tx: watch::Sender<Option<ExitInfo>>,
) {
    let mut owner_gone = false;
    let result = loop {
        tokio::select! {
            result = Box::into_pin(guard.child.wait()) => break result,
            signal = signals.recv(), if !owner_gone => match signal {
                Some(signal) => {
                    let _ = guard.child.signal(signal);
                }
                None => {
                    owner_gone = true;
                    let _ = guard.child.signal(libc::SIGKILL);
                }
            },
        }
    };
    let _ = guard.child.signal(libc::SIGKILL);
    guard.reaped = true;
    if let Some((records, pid)) = &guard.records {
        records.forget(*pid);
    }
    let info = match result {
        Ok(status) => ExitInfo::from_status(status),
        Err(e) => ExitInfo::unknown(&format!("wait failed: {e}")),
    };
    tracing::debug!(status = %info.description, "agent process ended");
    exit_tx.send_replace(Some(info));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_is_bounded() {
        let mut buf = TailBuf::default();
        for i in 0..100 {
            buf.push(format!("line {i}").as_bytes());
        }
        assert_eq!(buf.lines.len(), TAIL_MAX_LINES);
        assert_eq!(buf.lines.back().map(String::as_str), Some("line 99"));
        let long = vec![b'x'; 5000];
        for _ in 0..20 {
            buf.push(&long);
        }
        assert!(buf.bytes <= TAIL_MAX_BYTES);
        assert!(buf.lines.iter().all(|l| l.len() <= TAIL_MAX_LINE));
    }
}
