//! claude-code stream-json dialect (`claude -p --input-format stream-json --output-format
//! stream-json --verbose --permission-prompt-tool stdio [--session-id ID | --resume ID]`):
//! one process across turns; user messages are queued and run in order; each turn emits
//! `system/init`, `assistant` / `user` messages, then one `result`. Control requests
//! `initialize` and `interrupt` are answered (`get_status` too with `--get-status`);
//! stdin EOF finishes queued turns and exits (code 1 if the last result was an error).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::claude_io::{ClaudeIo, Control, MODEL};
use crate::cli::Config;
use crate::engine::{Engine, ResumeError, TurnEnd};
use crate::out::Out;
use crate::rpc::{Lines, text_of};

/// Tokens of queued and running turns, cancelled all at once by `interrupt`.
type Active = Arc<Mutex<HashMap<u64, CancellationToken>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Queued {
    seq: u64,
    text: String,
    token: CancellationToken,
}

/// Pick the session from `--resume` / `--session-id`; `Err(exit code)` after printing
/// the error the way claude does.
fn open_session(engine: &Engine, config: &Config) -> Result<Result<String, i32>> {
    if let Some(id) = &config.resume {
        return Ok(match engine.resume(id) {
            Ok(resumed) => Ok(resumed.id),
            Err(ResumeError::NotFound(_)) => {
                eprintln!("No conversation found with session ID: {id}");
                Err(1)
            }
            Err(e) => {
                eprintln!("fake-agent: {e}");
                Err(1)
            }
        });
    }
    if let Some(id) = &config.session_id {
        if engine.exists(id) {
            eprintln!("Error: Session ID {id} is already in use.");
            return Ok(Err(1));
        }
        return Ok(Ok(engine.new_session(id.clone())?));
    }
    Ok(Ok(engine.new_session(uuid::Uuid::new_v4().to_string())?))
}

pub async fn run(engine: Arc<Engine>, config: &Config) -> Result<i32> {
    let session_id = match open_session(&engine, config)? {
        Ok(id) => id,
        Err(code) => return Ok(code),
    };
    let control = Arc::new(Control::new(Out::new()));
    let active: Active = Arc::new(Mutex::new(HashMap::new()));
    let (tx, rx) = mpsc::unbounded_channel();
    let status = json!({"sections": [{"title": "Session", "rows": [
        {"label": "Version", "value": env!("CARGO_PKG_VERSION")},
        {"label": "Session ID", "value": session_id},
    ]}]});
    let runner = tokio::spawn(run_turns(
        Arc::clone(&engine),
        Arc::clone(&control),
        Arc::clone(&active),
        session_id,
        rx,
    ));
    let seq = AtomicU64::new(0);

    let mut lines = Lines::stdin();
    while let Some(line) = lines.next().await? {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            eprintln!("fake-agent: ignoring non-JSON input line: {line}");
            continue;
        };
        match msg["type"].as_str() {
            Some("user") => {
                let text = text_of(msg["message"].get("content"));
                let token = CancellationToken::new();
                let seq = seq.fetch_add(1, Ordering::SeqCst);
                lock(&active).insert(seq, token.clone());
                let _ = tx.send(Queued { seq, text, token });
            }
            Some("control_request") => {
                let id = &msg["request_id"];
                match msg["request"]["subtype"].as_str().unwrap_or_default() {
                    "initialize" if config.hang_init => {
                        eprintln!("fake-agent: not answering initialize as asked");
                    }
                    "initialize" => control.respond(id, initialize_response()).await?,
                    "get_status" if config.get_status => {
                        control.respond(id, status.clone()).await?;
                    }
                    "interrupt" => {
                        for token in lock(&active).values() {
                            token.cancel();
                        }
                        control.respond(id, json!({})).await?;
                    }
                    "set_permission_mode"
                    | "set_model"
                    | "set_max_thinking_tokens"
                    | "mcp_status" => control.respond(id, json!({})).await?,
                    other => {
                        let error = format!("Unsupported control request subtype: {other}");
                        control.respond_error(id, &error).await?;
                    }
                }
            }
            Some("control_response") => control.deliver(&msg["response"]),
            _ => {}
        }
    }
    drop(tx);
    Ok(runner.await?)
}

fn initialize_response() -> Value {
    json!({
        "commands": [],
        "output_style": "default",
        "available_output_styles": ["default"],
        "models": [{"value": MODEL, "displayName": "Fake model", "description": "fake-agent"}],
        "account": {},
    })
}

/// Run queued turns in order until the queue closes; the exit code.
async fn run_turns(
    engine: Arc<Engine>,
    control: Arc<Control>,
    active: Active,
    session_id: String,
    mut rx: mpsc::UnboundedReceiver<Queued>,
) -> i32 {
    let mut last_error = false;
    while let Some(queued) = rx.recv().await {
        match run_one(&engine, &control, &session_id, &queued).await {
            Ok(is_error) => last_error = is_error,
            Err(e) => {
                eprintln!("fake-agent: {e:#}");
                return 1;
            }
        }
        lock(&active).remove(&queued.seq);
    }
    i32::from(last_error)
}

/// One turn; whether its result was an error.
async fn run_one(
    engine: &Engine,
    control: &Arc<Control>,
    session_id: &str,
    queued: &Queued,
) -> Result<bool> {
    let started = Instant::now();
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let init = json!({
        "type": "system",
        "subtype": "init",
        "cwd": cwd,
        "session_id": session_id,
        "tools": ["Bash", "AskUserQuestion"],
        "mcp_servers": [],
        "model": MODEL,
        "permissionMode": "default",
        "slash_commands": [],
        "apiKeySource": "none",
        "claude_code_version": env!("CARGO_PKG_VERSION"),
        "output_style": "default",
        "agents": [],
        "skills": [],
        "plugins": [],
        "uuid": uuid::Uuid::new_v4().to_string(),
    });
    control.out().send(&init).await?;

    let mut io = ClaudeIo::new(Arc::clone(control), session_id);
    let end = engine
        .run_turn(session_id, &queued.text, &mut io, &queued.token)
        .await;
    let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut result = json!({
        "type": "result",
        "subtype": "success",
        "is_error": false,
        "duration_ms": ms,
        "duration_api_ms": ms,
        "num_turns": 1,
        "session_id": session_id,
        "total_cost_usd": 0,
        "usage": {"input_tokens": io.spent.0, "output_tokens": io.spent.1,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        "modelUsage": {},
        "permission_denials": io.denials,
        "uuid": uuid::Uuid::new_v4().to_string(),
    });
    if let Ok(TurnEnd::Limited { secs }) = &end {
        // As Claude Code 2.1 reports a subscription's limit: a rejected
        // `rate_limit_event`, then a 429 `result`.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let event = json!({"type": "rate_limit_event", "session_id": session_id,
                           "rate_limit_info": {"status": "rejected", "resetsAt": now + secs,
                                               "rateLimitType": "five_hour"},
                           "uuid": uuid::Uuid::new_v4().to_string()});
        control.out().send(&event).await?;
        result["is_error"] = json!(true);
        result["api_error_status"] = json!(429);
        result["api_error_type"] = json!("rate_limit_error");
        result["result"] = json!(
            "API Error: Request rejected (429) · This request would exceed your account's rate limit."
        );
        control.out().send(&result).await?;
        return Ok(true);
    }
    let error = match end {
        Ok(TurnEnd::Completed) => None,
        Ok(TurnEnd::Cancelled) => Some("interrupted".to_owned()),
        Ok(TurnEnd::Failed(message)) => Some(message),
        Ok(TurnEnd::Limited { .. }) => None,
        Err(e) => Some(format!("{e:#}")),
    };
    let is_error = error.is_some();
    match error {
        None => {
            result["result"] = json!(io.text);
            result["stop_reason"] = json!("end_turn");
        }
        Some(message) => {
            result["subtype"] = json!("error_during_execution");
            result["is_error"] = json!(true);
            result["stop_reason"] = Value::Null;
            result["errors"] = json!([message]);
        }
    }
    control.out().send(&result).await?;
    Ok(is_error)
}
