//! The dialect-independent script engine: sessions (create / resume, with the
//! `--refuse-resume` and `--resume-other-id` quirks) and running one turn by the script,
//! talking to the client through a dialect's [`TurnIo`].

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use crate::script::{self, Directive, Permission};
use crate::store::Store;

/// A command tool call made by the `approve` directive.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub id: String,
    pub title: String,
    /// `echo <title>`.
    pub command: String,
}

/// How a tool call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEnd {
    /// Ran; `output` is what the command printed.
    Completed { output: String },
    /// The user rejected it.
    Declined,
    /// The permission request was cancelled (or the turn was).
    Cancelled,
}

/// How a turn ended (a crash never returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    Completed,
    Cancelled,
    Failed(String),
    /// The vendor's usage limit, resetting in this many seconds.
    Limited {
        secs: u64,
    },
}

/// The wire side of a turn; one implementation per dialect.
pub trait TurnIo: Send {
    /// A piece of agent message text.
    fn chunk(&mut self, text: &str) -> impl Future<Output = Result<()>> + Send;
    /// A raw (non-JSON) stdout line.
    fn raw_line(&mut self, line: &str) -> impl Future<Output = Result<()>> + Send;
    /// A tool call is announced (before asking permission).
    fn tool_started(&mut self, call: &ToolCall) -> impl Future<Output = Result<()>> + Send;
    /// Ask the client for permission; dropped if the turn is cancelled meanwhile.
    fn permission(&mut self, call: &ToolCall) -> impl Future<Output = Result<Permission>> + Send;
    /// The tool call ended.
    fn tool_finished(
        &mut self,
        call: &ToolCall,
        end: &ToolEnd,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Report usage: `input` and `output` tokens spent since the last report.
    fn usage(&mut self, input: u64, output: u64) -> impl Future<Output = Result<()>> + Send;
    /// The vendor's report that the account's usage window is `percent` used (the
    /// dialects without such a signal send nothing).
    fn window(&mut self, percent: u8) -> impl Future<Output = Result<()>> + Send {
        let _ = percent;
        async { Ok(()) }
    }
    /// Ask the user a question; `None` = declined / cancelled. Dropped on cancel.
    fn ask(&mut self, question: &str) -> impl Future<Output = Result<Option<String>>> + Send;
    /// The stdio MCP servers the client gave this session (ACP `mcpServers`).
    fn mcp_servers(&self) -> Vec<crate::mcp_client::McpServerSpec> {
        Vec::new()
    }
}

/// Why a session could not be loaded or resumed.
#[derive(Debug)]
pub enum ResumeError {
    NotFound(String),
    Refused(String),
    Io(anyhow::Error),
}

impl std::fmt::Display for ResumeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResumeError::NotFound(id) => write!(f, "session not found: {id}"),
            ResumeError::Refused(id) => write!(f, "refusing to resume session {id} as asked"),
            ResumeError::Io(e) => write!(f, "{e:#}"),
        }
    }
}

/// A session made live again by load / resume.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The id the session really has from now on (differs with `--resume-other-id`).
    pub id: String,
    /// Earlier user messages (empty with `--resume-other-id`: a brand-new session).
    pub history: Vec<String>,
}

#[derive(Debug)]
pub struct Engine {
    store: Store,
    refuse_resume: bool,
    resume_other_id: bool,
    /// Each session's working directory, as the client gave it (for `write`).
    cwds: std::sync::Mutex<std::collections::HashMap<String, std::path::PathBuf>>,
}

impl Engine {
    /// The sessions' store (Codex threads keep their usage there too).
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn new(store: Store, refuse_resume: bool, resume_other_id: bool) -> Self {
        Self {
            store,
            refuse_resume,
            resume_other_id,
            cwds: Default::default(),
        }
    }

    /// Session `id` works in `cwd` (the client's `session/new` or `session/load`).
    pub fn set_cwd(&self, id: &str, cwd: &str) {
        if let Ok(mut m) = self.cwds.lock() {
            m.insert(id.to_owned(), std::path::PathBuf::from(cwd));
        }
    }

    fn cwd_of(&self, id: &str) -> std::path::PathBuf {
        self.cwds
            .lock()
            .ok()
            .and_then(|m| m.get(id).cloned())
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default()
    }

    /// Create and persist an empty session with a new id.
    pub fn new_session(&self, id: String) -> Result<String> {
        self.store.save(&id, &[])?;
        Ok(id)
    }

    /// Whether a session with this id is persisted.
    pub fn exists(&self, id: &str) -> bool {
        self.store.exists(id)
    }

    /// Load / resume a persisted session, honouring the quirk flags.
    pub fn resume(&self, id: &str) -> Result<Resumed, ResumeError> {
        if self.refuse_resume {
            return Err(ResumeError::Refused(id.to_owned()));
        }
        let history = self
            .store
            .load(id)
            .map_err(ResumeError::Io)?
            .ok_or_else(|| ResumeError::NotFound(id.to_owned()))?;
        if self.resume_other_id {
            let other = self
                .new_session(uuid::Uuid::new_v4().to_string())
                .map_err(ResumeError::Io)?;
            return Ok(Resumed {
                id: other,
                history: Vec::new(),
            });
        }
        Ok(Resumed {
            id: id.to_owned(),
            history,
        })
    }

    /// Run one turn of session `id` for the user message `text`. The message is recorded
    /// (and persisted) before anything else happens.
    pub async fn run_turn<I: TurnIo>(
        &self,
        id: &str,
        text: &str,
        io: &mut I,
        cancel: &CancellationToken,
    ) -> Result<TurnEnd> {
        let text = text.trim().to_owned();
        let mut history = self.store.load(id)?.unwrap_or_default();
        let earlier = history.clone();
        history.push(text.clone());
        self.store.save(id, &history)?;
        let reply = |own: &str| script::with_remembers(own, &earlier);

        match script::parse(&text) {
            Directive::Echo => io.chunk(&reply(&format!("echo: {text}"))).await?,
            Directive::Stream { count, interval_ms } => {
                for i in 1..=count {
                    if i > 1 && sleep_or_cancel(interval_ms, cancel).await {
                        return Ok(TurnEnd::Cancelled);
                    }
                    if cancel.is_cancelled() {
                        return Ok(TurnEnd::Cancelled);
                    }
                    io.chunk(&format!("chunk {i} ")).await?;
                }
                io.chunk(&format!("\n{}", script::remembers_line(&earlier)))
                    .await?;
            }
            Directive::Rate { count, per_sec } => {
                if let Some(end) = chunks_at_rate(io, count, per_sec, cancel).await? {
                    return Ok(end);
                }
                io.chunk(&format!("\n{}", script::remembers_line(&earlier)))
                    .await?;
            }
            Directive::Approve { title } => {
                if let Some(end) = approve(io, title, cancel, &reply).await? {
                    return Ok(end);
                }
            }
            Directive::SlowApprove { ms, title } => {
                if sleep_or_cancel(ms, cancel).await {
                    return Ok(TurnEnd::Cancelled);
                }
                if let Some(end) = approve(io, title, cancel, &reply).await? {
                    return Ok(end);
                }
            }
            Directive::StreamTools { count, title } => {
                let third = (count / 3).max(1);
                for i in 1..=count {
                    if cancel.is_cancelled() {
                        return Ok(TurnEnd::Cancelled);
                    }
                    io.chunk(&format!("chunk {i} ")).await?;
                    if i % third == 0 && i < count {
                        let call = ToolCall {
                            id: format!("call_{}", uuid::Uuid::new_v4().simple()),
                            command: format!("echo step {i}"),
                            title: format!("step {i}"),
                        };
                        io.tool_started(&call).await?;
                        let output = format!("step {i}\n");
                        io.tool_finished(&call, &ToolEnd::Completed { output })
                            .await?;
                    }
                }
                if let Some(end) = approve(io, title, cancel, &reply).await? {
                    return Ok(end);
                }
            }
            Directive::Ask { question } => {
                let answer = tokio::select! {
                    a = io.ask(&question) => Some(a?),
                    _ = cancel.cancelled() => None,
                };
                let Some(answer) = answer.filter(|_| !cancel.is_cancelled()) else {
                    return Ok(TurnEnd::Cancelled);
                };
                io.chunk(&reply(&script::answer_reply(answer.as_deref())))
                    .await?;
            }
            Directive::Spend {
                reports,
                tokens,
                interval_ms,
            } => {
                for i in 1..=reports {
                    if i > 1 && sleep_or_cancel(interval_ms, cancel).await {
                        return Ok(TurnEnd::Cancelled);
                    }
                    if cancel.is_cancelled() {
                        return Ok(TurnEnd::Cancelled);
                    }
                    io.usage(tokens, 0).await?;
                }
                io.chunk(&reply(&format!("spent {reports}×{tokens}")))
                    .await?;
            }
            Directive::Window { percents } => {
                for (i, p) in percents.iter().enumerate() {
                    if i > 0 && sleep_or_cancel(100, cancel).await {
                        return Ok(TurnEnd::Cancelled);
                    }
                    if cancel.is_cancelled() {
                        return Ok(TurnEnd::Cancelled);
                    }
                    io.window(*p).await?;
                }
                let last = percents.last().copied().unwrap_or(0);
                io.chunk(&reply(&format!("window at {last}%"))).await?;
            }
            Directive::Sleep { ms } => {
                if sleep_or_cancel(ms, cancel).await {
                    return Ok(TurnEnd::Cancelled);
                }
                io.chunk(&reply(&format!("slept {ms}"))).await?;
            }
            Directive::Write { path, content } => {
                let target = self.cwd_of(id).join(&path);
                let done = target
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&target, format!("{content}\n")));
                match done {
                    Ok(()) => io.chunk(&reply(&format!("wrote {path}"))).await?,
                    Err(e) => {
                        io.chunk(&reply(&format!("cannot write {path}: {e}")))
                            .await?
                    }
                }
            }
            Directive::Crash => {
                io.chunk("about to crash").await?;
                eprintln!("fake-agent: crashing as asked");
                std::process::exit(3);
            }
            Directive::Garbage => {
                for line in script::GARBAGE_LINES {
                    io.raw_line(line).await?;
                }
                io.chunk(&reply("garbage done")).await?;
            }
            Directive::Fail => return Ok(TurnEnd::Failed(script::FAIL_MESSAGE.to_owned())),
            Directive::Limit { secs } => return Ok(TurnEnd::Limited { secs }),
            Directive::Hang => {
                cancel.cancelled().await;
                return Ok(TurnEnd::Cancelled);
            }
            Directive::Freeze => std::future::pending::<()>().await,
            Directive::Flood { lines } => {
                flood_stderr(lines)?;
                io.chunk(&reply(&format!("flooded {lines}"))).await?;
            }
            Directive::Junk => {
                for line in script::JUNK_LINES {
                    io.raw_line(line).await?;
                }
                io.chunk(&reply("junk done")).await?;
            }
            Directive::Replay { path } => {
                let text = std::fs::read_to_string(&path)?;
                for line in text.lines() {
                    io.raw_line(line).await?;
                }
                io.chunk(&reply("replay done")).await?;
            }
            Directive::Env { names } => {
                let text = script::env_reply(&names, |n| std::env::var(n).ok());
                io.chunk(&reply(&text)).await?;
            }
            Directive::Orphan => {
                let child = std::process::Command::new("sleep")
                    .arg("600")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()?;
                let pid = child.id();
                // Reaped if it ends while the fake agent lives; it outlives a killed one.
                std::thread::spawn(move || {
                    let mut child = child;
                    let _ = child.wait();
                });
                io.chunk(&reply(&format!("orphan {pid}"))).await?;
            }
            Directive::BigLine { kib } => {
                let len = usize::try_from(kib)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(1024);
                io.raw_line(&"z".repeat(len)).await?;
                io.chunk(&reply("bigline done")).await?;
            }
            Directive::Mcp { tool, args } => {
                let Some(server) = io.mcp_servers().into_iter().next() else {
                    io.chunk(&reply("mcp: the client gave no MCP server"))
                        .await?;
                    return Ok(TurnEnd::Completed);
                };
                // `mcp env`: no call; the server's environment as a JSON object (lets a
                // test act with the session's own MCP token).
                if tool == "env" {
                    let env: serde_json::Map<String, serde_json::Value> = server
                        .env
                        .iter()
                        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                        .collect();
                    io.chunk(&reply(&serde_json::Value::Object(env).to_string()))
                        .await?;
                    return Ok(TurnEnd::Completed);
                }
                // `A && B`: calls in sequence on one connection, opened before the first
                // is announced; `$task_id` in a later call is the task_id of the previous
                // result.
                let mut client = tokio::select! {
                    c = crate::mcp_client::Client::start(&server) => c,
                    _ = cancel.cancelled() => return Ok(TurnEnd::Cancelled),
                };
                let mut texts = Vec::new();
                let mut last_task = String::new();
                let chain = format!("{tool} {args}");
                for step in chain.split(" && ") {
                    let step = step.trim();
                    let (tool, args) = step.split_once(char::is_whitespace).unwrap_or((step, "{}"));
                    let args = args.replace("$task_id", &last_task);
                    let args: serde_json::Value = match serde_json::from_str(&args) {
                        Ok(v) => v,
                        Err(e) => {
                            if let Ok(c) = client {
                                c.close().await;
                            }
                            io.chunk(&reply(&format!("mcp: arguments are not JSON: {e}")))
                                .await?;
                            return Ok(TurnEnd::Completed);
                        }
                    };
                    let call = ToolCall {
                        id: format!("call_{}", uuid::Uuid::new_v4().simple()),
                        title: format!("mcp {}: {tool}", server.name),
                        command: format!("mcp {tool}"),
                    };
                    io.tool_started(&call).await?;
                    let call_result = async {
                        match &mut client {
                            Ok(c) => c.call(tool, args, &call.id).await,
                            Err(e) => Err(anyhow::anyhow!("{e:#}")),
                        }
                    };
                    let result = tokio::select! {
                        r = call_result => r,
                        _ = cancel.cancelled() => {
                            io.tool_finished(&call, &ToolEnd::Cancelled).await?;
                            return Ok(TurnEnd::Cancelled);
                        }
                    };
                    let text = match result {
                        Ok(text) => text,
                        Err(e) => format!("mcp error: {e:#}"),
                    };
                    io.tool_finished(
                        &call,
                        &ToolEnd::Completed {
                            output: text.clone(),
                        },
                    )
                    .await?;
                    if let Some(id) = serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| v.get("task_id").and_then(|t| t.as_str().map(str::to_owned)))
                    {
                        last_task = id;
                    }
                    texts.push(text);
                }
                if let Ok(c) = client {
                    c.close().await;
                }
                io.chunk(&reply(&texts.join("\n"))).await?;
            }
        }
        Ok(TurnEnd::Completed)
    }
}

/// The `approve` directive: a command tool call that asks permission, then the decision
/// as text. `Some` when the turn ends early (cancelled).
async fn approve<I: TurnIo>(
    io: &mut I,
    title: String,
    cancel: &CancellationToken,
    reply: &impl Fn(&str) -> String,
) -> Result<Option<TurnEnd>> {
    let call = ToolCall {
        id: format!("call_{}", uuid::Uuid::new_v4().simple()),
        command: format!("echo {title}"),
        title,
    };
    io.tool_started(&call).await?;
    let decision = tokio::select! {
        p = io.permission(&call) => Some(p?),
        _ = cancel.cancelled() => None,
    };
    let decision = match decision {
        Some(p) if !cancel.is_cancelled() => p,
        _ => {
            io.tool_finished(&call, &ToolEnd::Cancelled).await?;
            return Ok(Some(TurnEnd::Cancelled));
        }
    };
    let end = match decision {
        Permission::Allowed | Permission::AllowedAlways => ToolEnd::Completed {
            output: format!("{}\n", call.title),
        },
        Permission::Denied => ToolEnd::Declined,
        Permission::Cancelled => ToolEnd::Cancelled,
    };
    io.tool_finished(&call, &end).await?;
    io.chunk(&reply(decision.reply())).await?;
    Ok(None)
}

/// `lines` lines on stderr (blocking: a reader that does not drain stderr stalls us).
fn flood_stderr(lines: u64) -> Result<()> {
    use std::io::Write;
    let mut stderr = std::io::stderr().lock();
    for i in 1..=lines {
        writeln!(stderr, "fake-agent: turn flood line {i} {}", "y".repeat(64))?;
    }
    Ok(())
}

/// Sleep `ms`; true if cancelled first.
/// The chunks of `rate N PER_SEC`: chunk `i` is due `i / per_sec` seconds after the first
/// (all at once when `per_sec` is 0). `Some(Cancelled)` when the turn was cancelled.
async fn chunks_at_rate<I: TurnIo>(
    io: &mut I,
    count: u32,
    per_sec: u64,
    cancel: &CancellationToken,
) -> Result<Option<TurnEnd>> {
    let start = tokio::time::Instant::now();
    for i in 1..=count {
        if cancel.is_cancelled() {
            return Ok(Some(TurnEnd::Cancelled));
        }
        if per_sec > 0 {
            let due = start + Duration::from_secs_f64(f64::from(i - 1) / per_sec as f64);
            if due > tokio::time::Instant::now() {
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = cancel.cancelled() => return Ok(Some(TurnEnd::Cancelled)),
                }
            }
        }
        io.chunk(&format!("chunk {i} ")).await?;
    }
    Ok(None)
}

async fn sleep_or_cancel(ms: u64, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => cancel.is_cancelled(),
        _ = cancel.cancelled() => true,
    }
}
