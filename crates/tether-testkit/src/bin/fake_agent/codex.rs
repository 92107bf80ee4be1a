//! `codex app-server` dialect: JSON-RPC without the `"jsonrpc"` field, one object per line.
//! initialize (+ `initialized` notification), thread/start, thread/resume, turn/start,
//! turn/interrupt, thread/unsubscribe; one process hosts many threads. Turn progress as
//! notifications (see `codex_io.rs` for the items and the server→client approval /
//! user-input requests).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::codex_io::{CodexIo, user_message_item};
use crate::engine::{Engine, ResumeError, TurnEnd};
use crate::out::Out;
use crate::rpc::{self, Incoming, Lines, Peer};

#[derive(Clone)]
struct Thread {
    /// The id really used (differs from the client's only with `--resume-other-id`).
    real: String,
    cwd: String,
}

struct Codex {
    peer: Arc<Peer>,
    engine: Arc<Engine>,
    hang_init: bool,
    home: PathBuf,
    initialized: AtomicBool,
    threads: Mutex<HashMap<String, Thread>>,
    /// Running turn per real thread id: (turn id, cancel token).
    turns: Mutex<HashMap<String, (String, CancellationToken)>>,
    /// Threads resumed whose last usage update is sent again at their next turn.
    replay: Mutex<std::collections::HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

pub async fn run(engine: Arc<Engine>, hang_init: bool, home: PathBuf) -> Result<()> {
    let codex = Arc::new(Codex {
        peer: Arc::new(Peer::new(Out::new(), false)),
        engine,
        hang_init,
        home,
        initialized: AtomicBool::new(false),
        threads: Mutex::new(HashMap::new()),
        turns: Mutex::new(HashMap::new()),
        replay: Mutex::new(std::collections::HashSet::new()),
    });
    let mut lines = Lines::stdin();
    while let Some(line) = lines.next().await? {
        match rpc::classify(&line) {
            None | Some(Incoming::Notification { .. }) => {}
            Some(Incoming::Invalid(line)) => {
                eprintln!("fake-agent: ignoring non-JSON-RPC line: {line}")
            }
            Some(Incoming::Response { id, reply }) => codex.peer.deliver(&id, reply),
            Some(Incoming::Request { id, method, params }) => {
                Arc::clone(&codex).request(id, &method, params).await?;
            }
        }
    }
    Ok(())
}

fn thread_json(id: &str, cwd: &str, history: &[String]) -> Value {
    let turns: Vec<Value> = history
        .iter()
        .enumerate()
        .map(|(i, text)| {
            json!({
                "id": format!("turn-{}", i + 1),
                "items": [user_message_item(&format!("user-{}", i + 1), text)],
                "status": "completed",
                "error": null,
            })
        })
        .collect();
    json!({
        "id": id,
        "preview": history.first().cloned().unwrap_or_default(),
        "ephemeral": false,
        "modelProvider": "fake",
        "createdAt": now(),
        "updatedAt": now(),
        "status": {"type": "idle"},
        "path": null,
        "cwd": cwd,
        "cliVersion": env!("CARGO_PKG_VERSION"),
        "source": "appServer",
        "gitInfo": null,
        "name": null,
        "turns": turns,
    })
}

fn sandbox_policy(mode: Option<&str>) -> Value {
    match mode {
        Some("read-only") => json!({"type": "readOnly"}),
        Some("danger-full-access") => json!({"type": "dangerFullAccess"}),
        _ => json!({"type": "workspaceWrite", "writableRoots": [], "networkAccess": false,
                    "excludeTmpdirEnvVar": false, "excludeSlashTmp": false}),
    }
}

fn turn_json(id: &str, status: &str, error: Value) -> Value {
    json!({"id": id, "items": [], "status": status, "error": error})
}

impl Codex {
    async fn request(self: Arc<Self>, id: Value, method: &str, params: Value) -> Result<()> {
        let peer = &self.peer;
        if method == "initialize" {
            if self.hang_init {
                eprintln!("fake-agent: not answering initialize as asked");
                return Ok(());
            }
            if self.initialized.swap(true, Ordering::SeqCst) {
                return peer
                    .respond_error(&id, rpc::INVALID_REQUEST, "Already initialized")
                    .await;
            }
            let result = json!({
                "userAgent": format!("fake-agent/{}", env!("CARGO_PKG_VERSION")),
                "codexHome": self.home,
                "platformFamily": "unix",
                "platformOs": std::env::consts::OS,
            });
            return peer.respond(&id, result).await;
        }
        if !self.initialized.load(Ordering::SeqCst) {
            return peer
                .respond_error(&id, rpc::INVALID_REQUEST, "Not initialized")
                .await;
        }
        match method {
            "thread/start" => {
                let real = self.engine.new_session(uuid::Uuid::now_v7().to_string())?;
                let thread = self.open_thread(&real, real.clone(), &params);
                let result = self.thread_result(&thread, &[], &params);
                peer.respond(&id, result.clone()).await?;
                peer.notify("thread/started", json!({"thread": result["thread"]}))
                    .await
            }
            "thread/resume" => {
                let requested = match rpc::str_param(&params, "threadId") {
                    Ok(s) => s.to_owned(),
                    Err(m) => return peer.respond_error(&id, rpc::INVALID_PARAMS, &m).await,
                };
                let resumed = match self.engine.resume(&requested) {
                    Ok(r) => r,
                    Err(ResumeError::NotFound(t)) => {
                        let message = format!("no rollout found for thread id {t}");
                        return peer
                            .respond_error(&id, rpc::INVALID_REQUEST, &message)
                            .await;
                    }
                    Err(e) => {
                        let message = e.to_string();
                        return peer
                            .respond_error(&id, rpc::INVALID_REQUEST, &message)
                            .await;
                    }
                };
                let thread = self.open_thread(&requested, resumed.id.clone(), &params);
                if resumed.id != requested {
                    lock(&self.threads).insert(resumed.id.clone(), thread.clone());
                }
                let result = self.thread_result(&thread, &resumed.history, &params);
                lock(&self.replay).insert(resumed.id.clone());
                peer.respond(&id, result).await
            }
            "turn/start" => self.start_turn(id, params).await,
            "thread/unsubscribe" => {
                // The client leaves the thread: it is unloaded (a later thread/resume
                // loads it again from the store).
                let client = params.get("threadId").and_then(Value::as_str);
                let gone = client.and_then(|t| lock(&self.threads).remove(t));
                let status = if gone.is_some() {
                    "unsubscribed"
                } else {
                    "notLoaded"
                };
                peer.respond(&id, json!({"status": status})).await
            }
            "turn/interrupt" => {
                let thread = params.get("threadId").and_then(Value::as_str);
                let turn = params.get("turnId").and_then(Value::as_str);
                let real = thread.and_then(|t| self.thread(t)).map(|t| t.real);
                if let Some(real) = real
                    && let Some((running, token)) = lock(&self.turns).get(&real)
                    && turn.is_none_or(|t| t == running)
                {
                    token.cancel();
                }
                peer.respond(&id, json!({})).await
            }
            other => {
                let message = format!("method not found: {other}");
                peer.respond_error(&id, rpc::METHOD_NOT_FOUND, &message)
                    .await
            }
        }
    }

    fn thread(&self, client_id: &str) -> Option<Thread> {
        lock(&self.threads).get(client_id).cloned()
    }

    fn open_thread(&self, client_id: &str, real: String, params: &Value) -> Thread {
        let cwd = params
            .get("cwd")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                std::env::current_dir()
                    .ok()
                    .map(|d| d.display().to_string())
            })
            .unwrap_or_else(|| "/".to_owned());
        self.engine.set_cwd(&real, &cwd);
        let thread = Thread { real, cwd };
        lock(&self.threads).insert(client_id.to_owned(), thread.clone());
        thread
    }

    fn thread_result(&self, thread: &Thread, history: &[String], params: &Value) -> Value {
        let approval = params
            .get("approvalPolicy")
            .cloned()
            .filter(|v| !v.is_null())
            .unwrap_or(json!("on-request"));
        json!({
            "thread": thread_json(&thread.real, &thread.cwd, history),
            "model": "fake-model",
            "modelProvider": "fake",
            "serviceTier": null,
            "cwd": thread.cwd,
            "approvalPolicy": approval,
            "approvalsReviewer": "user",
            "sandbox": sandbox_policy(params.get("sandbox").and_then(Value::as_str)),
            "reasoningEffort": null,
        })
    }

    async fn start_turn(self: Arc<Self>, id: Value, params: Value) -> Result<()> {
        let peer = &self.peer;
        let client_thread = match rpc::str_param(&params, "threadId") {
            Ok(s) => s.to_owned(),
            Err(m) => return peer.respond_error(&id, rpc::INVALID_PARAMS, &m).await,
        };
        let Some(thread) = self.thread(&client_thread) else {
            let message = format!("thread not found: {client_thread}");
            return peer
                .respond_error(&id, rpc::INVALID_REQUEST, &message)
                .await;
        };
        let turn_id = uuid::Uuid::new_v4().to_string();
        let token = CancellationToken::new();
        let busy = {
            let mut turns = lock(&self.turns);
            let busy = turns.contains_key(&thread.real);
            if !busy {
                turns.insert(thread.real.clone(), (turn_id.clone(), token.clone()));
            }
            busy
        };
        if busy {
            let message = format!("a turn is already running in thread {client_thread}");
            return peer
                .respond_error(&id, rpc::INVALID_REQUEST, &message)
                .await;
        }
        let text = rpc::text_of(params.get("input"));
        let turn = turn_json(&turn_id, "inProgress", Value::Null);
        peer.respond(&id, json!({"turn": turn})).await?;
        tokio::spawn(async move {
            if let Err(e) = self.run_turn(&thread, &turn_id, &text, token).await {
                eprintln!("fake-agent: {e:#}");
                std::process::exit(1);
            }
        });
        Ok(())
    }

    async fn run_turn(
        &self,
        thread: &Thread,
        turn_id: &str,
        text: &str,
        token: CancellationToken,
    ) -> Result<()> {
        let peer = &self.peer;
        let tid = thread.real.as_str();
        let turn = turn_json(turn_id, "inProgress", Value::Null);
        peer.notify("turn/started", json!({"threadId": tid, "turn": turn}))
            .await?;
        let mut io = CodexIo::new(
            Arc::clone(peer),
            tid,
            turn_id,
            &thread.cwd,
            token.clone(),
            self.engine.store().clone(),
        );
        io.active(&[]).await?;
        if lock(&self.replay).remove(tid) {
            io.replay_usage().await?;
        }
        let item = user_message_item(&uuid::Uuid::new_v4().to_string(), text.trim());
        io.item("item/started", item.clone()).await?;
        io.item("item/completed", item).await?;

        let end = self.engine.run_turn(tid, text, &mut io, &token).await;
        io.close_message().await?;
        lock(&self.turns).remove(tid);
        let info = match &end {
            Ok(TurnEnd::Limited { .. }) => "usageLimitExceeded",
            _ => "other",
        };
        if let Ok(TurnEnd::Limited { secs }) = &end {
            // As codex 0.171 does: the 429's rate-limit headers as a snapshot (the window
            // full, its reset), then the error.
            let resets_at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| (d.as_millis() as u64 + secs * 1000).div_ceil(1000))
                .unwrap_or(0);
            let limits = json!({"limitId": "codex", "primary": {"usedPercent": 100,
                "windowDurationMins": 300, "resetsAt": resets_at}, "secondary": null,
                "credits": null, "planType": null});
            peer.notify("account/rateLimits/updated", json!({"rateLimits": limits}))
                .await?;
        }
        let failure = match end {
            Ok(TurnEnd::Completed) => None,
            Ok(TurnEnd::Cancelled) => Some(("interrupted", Value::Null)),
            Ok(TurnEnd::Failed(message)) => Some(("failed", json!(message))),
            Ok(TurnEnd::Limited { secs }) => Some((
                "failed",
                json!(format!(
                    "You've hit your usage limit. Try again in {secs} s."
                )),
            )),
            Err(e) => Some(("failed", json!(format!("{e:#}")))),
        };

        let (status, error) = match failure {
            None => ("completed", Value::Null),
            Some((status, Value::Null)) => (status, Value::Null),
            Some((status, message)) => {
                let error = json!({"message": message, "codexErrorInfo": info,
                                   "additionalDetails": null});
                peer.notify(
                    "error",
                    json!({"error": error, "willRetry": false, "threadId": tid,
                           "turnId": turn_id}),
                )
                .await?;
                (status, error)
            }
        };
        let turn = turn_json(turn_id, status, error);
        peer.notify("turn/completed", json!({"threadId": tid, "turn": turn}))
            .await?;
        io.idle().await
    }
}
