//! `fake-agent`: a scripted fake coding agent that tether's tests drive instead of the real
//! CLIs. It speaks one of three dialects (`--dialect acp|codex|claude`, or
//! `FAKE_AGENT_DIALECT`): ACP v1, `codex app-server` JSON-RPC, and claude-code
//! stream-json. The text of each user message scripts the turn (see `script.rs`):
//! echo (default), `stream N MS`, `rate N PER_SEC` (N chunks at a fixed rate), `approve <title>`, `ask <question>`, `sleep MS`,
//! `crash`, `garbage`, `fail`, `hang`, `freeze` (ignores cancel), `flood N` (stderr lines),
//! `junk` (JSON lines of no dialect), `bigline KIB`, `replay <file>` (its lines on stdout),
//! `env NAME...` (the variables as the agent got them), `orphan` (a `sleep 600` left in
//! the agent's process group),
//! `mcp <tool> <json-args>` (a call on the first stdio
//! MCP server of the session; `A && B` chains calls, `$task_id` = the previous task id;
//! `mcp env` prints that server's environment). Every final reply ends with a line
//! `remembers N: [earlier user messages]`, and sessions persist as
//! `<state-dir>/<session_id>.json`, so resume across processes can be checked.
//!
//! Flags (each also an environment variable): `--state-dir DIR` (`FAKE_AGENT_STATE_DIR`),
//! `--exit-on-start` (`FAKE_AGENT_EXIT_ON_START=1`), `--refuse-resume`
//! (`FAKE_AGENT_REFUSE_RESUME=1`), `--resume-other-id` (`FAKE_AGENT_RESUME_OTHER_ID=1`),
//! `--no-initialize-reply` (`FAKE_AGENT_HANG_INIT=1`), `--stderr-flood N`
//! (`FAKE_AGENT_STDERR_FLOOD=N`). acp dialect: `--session-id ID` answers every `session/new`
//! with ID (a misbehaving agent). claude dialect: `--session-id ID`, `--resume ID`,
//! `--get-status` (`FAKE_AGENT_GET_STATUS=1`: answer the `get_status` control request
//! with the session actually open, as claude 2.1 does; without it the request is
//! unsupported, as in older claude versions).
//! Unknown arguments are ignored; without `--dialect`, `app-server` selects codex and
//! `--input-format stream-json` selects claude.

mod acp;
mod claude;
mod claude_io;
mod cli;
mod codex;
mod codex_io;
mod engine;
mod mcp_client;
mod out;
mod rpc;
mod script;
mod store;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;

use crate::cli::{Config, Dialect};
use crate::engine::Engine;
use crate::store::Store;

fn main() -> ExitCode {
    let config = match cli::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fake-agent: {e:#}");
            return ExitCode::from(64);
        }
    };
    if config.exit_on_start {
        eprintln!("fake-agent: exiting on start as asked");
        return ExitCode::from(2);
    }
    flood_stderr(config.stderr_flood);

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fake-agent: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match runtime.block_on(run(config)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fake-agent: {e:#}");
            1
        }
    };
    // Exit without waiting for tasks still blocked on stdin or sleeping in a turn.
    std::process::exit(code);
}

/// Run the chosen dialect until stdin closes; the process exit code.
async fn run(config: Config) -> Result<i32> {
    let store = Store::new(&config.state_dir)?;
    let engine = Arc::new(Engine::new(
        store,
        config.refuse_resume,
        config.resume_other_id,
    ));
    match config.dialect {
        Dialect::Acp => acp::run(engine, config.hang_init, config.session_id.clone())
            .await
            .map(|()| 0),
        Dialect::Codex => codex::run(engine, config.hang_init, config.state_dir)
            .await
            .map(|()| 0),
        Dialect::Claude => claude::run(engine, &config).await,
    }
}

fn flood_stderr(lines: usize) {
    if lines == 0 {
        return;
    }
    let mut stderr = std::io::stderr().lock();
    for i in 1..=lines {
        let junk = "x".repeat(64);
        if writeln!(stderr, "fake-agent: stderr flood line {i} {junk}").is_err() {
            return;
        }
    }
}
