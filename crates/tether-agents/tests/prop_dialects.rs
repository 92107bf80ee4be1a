//! Hostile agent output, property-tested through the public driver API for all three
//! dialects (ACP, Codex app-server, Claude stream-json): the fake agent (`cargo build -p
//! tether-testkit --bin fake-agent` first) prints generated lines as they are — JSON in
//! the shapes of the dialect's messages with random values, other JSON, truncated JSON,
//! arbitrary text — in the middle of a turn, then ends the turn properly.
//!
//! Whatever the lines say, the reader never panics or wedges: every turn ends (at the
//! latest when the session is cancelled or shut down) with an outcome or an error that has
//! a stable code, and the process is reaped. Bounded: 128 cases per dialect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value};
use tether_agents::{
    AcpDriver, AgentDriver, AgentEvent, AgentSpec, ClaudeDriver, CodexDriver, DriverKind,
    StartRequest,
};

const CASES: u32 = 128;

/// How the cases ended, per dialect (printed, for the curious).
static STATS: std::sync::Mutex<BTreeMap<(&'static str, String), u32>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Keys that mean something in one of the dialects.
const KEYS: &[&str] = &[
    "id",
    "method",
    "params",
    "result",
    "error",
    "code",
    "message",
    "data",
    "jsonrpc",
    "sessionId",
    "update",
    "sessionUpdate",
    "content",
    "text",
    "type",
    "toolCallId",
    "title",
    "kind",
    "status",
    "options",
    "optionId",
    "threadId",
    "turnId",
    "turn",
    "thread",
    "item",
    "itemId",
    "delta",
    "subtype",
    "session_id",
    "event",
    "request_id",
    "request",
    "response",
    "is_error",
    "usage",
    "stop_reason",
    "stopReason",
    "parent_tool_use_id",
    "tool_use_id",
    "questions",
    "outcome",
    "name",
    "input",
    "index",
    "content_block",
    "errors",
    "rawInput",
];

/// Strings that mean something in one of the dialects.
const WORDS: &[&str] = &[
    "2.0",
    "session/update",
    "session/request_permission",
    "session/prompt",
    "session/new",
    "session/load",
    "elicitation/create",
    "fs/read_text_file",
    "terminal/create",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "turn/started",
    "turn/completed",
    "item/started",
    "item/completed",
    "item/agentMessage/delta",
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
    "item/tool/requestUserInput",
    "thread/started",
    "thread/tokenUsage/updated",
    "error",
    "agentMessage",
    "commandExecution",
    "fileChange",
    "reasoning",
    "completed",
    "failed",
    "interrupted",
    "inProgress",
    "assistant",
    "user",
    "result",
    "system",
    "init",
    "stream_event",
    "control_request",
    "control_response",
    "control_cancel_request",
    "can_use_tool",
    "success",
    "error_during_execution",
    "content_block_delta",
    "content_block_start",
    "message_start",
    "message_stop",
    "text_delta",
    "thinking_delta",
    "tool_use",
    "tool_result",
    "end_turn",
    "max_tokens",
    "refusal",
    "allow_once",
    "reject_once",
    "cancelled",
    "",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..8).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(WORDS).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        4 => prop::sample::select(KEYS).prop_map(str::to_owned),
                        1 => "\\PC{0,6}"
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A message shaped like the dialect's: the usual top-level keys, random values.
fn message(dialect: &'static str) -> impl Strategy<Value = Value> {
    let top: &'static [&'static str] = match dialect {
        "claude" => &[
            "type",
            "subtype",
            "session_id",
            "message",
            "event",
            "request_id",
            "request",
            "response",
            "result",
            "is_error",
            "uuid",
            "parent_tool_use_id",
        ],
        _ => &["jsonrpc", "id", "method", "params", "result", "error"],
    };
    let methods: Vec<&'static str> = WORDS.to_vec();
    prop::collection::vec(
        (
            prop::sample::select(top),
            prop_oneof![
                3 => json_value(),
                2 => prop::sample::select(methods.clone()).prop_map(Value::from),
                1 => (0i64..6).prop_map(Value::from),
            ],
        ),
        1..6,
    )
    .prop_map(|kv| {
        Value::Object(
            kv.into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<Map<_, _>>(),
        )
    })
}

fn line(dialect: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => message(dialect).prop_map(|v| v.to_string()),
        2 => json_value().prop_map(|v| v.to_string()),
        1 => (message(dialect), any::<prop::sample::Index>()).prop_map(|(v, i)| {
            let s = v.to_string();
            let cut = i.index(s.len() + 1);
            let mut end = cut.min(s.len());
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        }),
        1 => "[^\\n\\r]{0,80}",
    ]
}

fn request(dialect: &str, dir: &Path) -> StartRequest {
    StartRequest {
        spec: AgentSpec {
            name: format!("fake-{dialect}"),
            driver: match dialect {
                "acp" => DriverKind::Acp,
                "codex" => DriverKind::Codex,
                _ => DriverKind::Claude,
            },
            command: tether_testkit::bin_path("fake-agent").display().to_string(),
            args: vec![
                "--dialect".to_owned(),
                dialect.to_owned(),
                "--state-dir".to_owned(),
                dir.display().to_string(),
            ],
            pass_env: Vec::new(),
            env: BTreeMap::new(),
        },
        cwd: dir.to_path_buf(),
        model: None,
        resume: None,
        mcp_servers: Vec::new(),
        ceiling: None,
    }
}

async fn driver_start(
    dialect: &str,
    req: StartRequest,
) -> Result<Box<dyn tether_agents::AgentSession>, tether_agents::AgentError> {
    let limit = Duration::from_secs(10);
    match dialect {
        "acp" => {
            AcpDriver {
                start_timeout: limit,
                records: None,
                hosts: None,
            }
            .start(req)
            .await
        }
        "codex" => {
            CodexDriver {
                start_timeout: limit,
                records: None,
                hosts: None,
            }
            .start(req)
            .await
        }
        _ => {
            ClaudeDriver {
                start_timeout: limit,
                records: None,
            }
            .start(req)
            .await
        }
    }
}

/// One case: a fresh session, a turn that replays `lines`, then shutdown.
async fn case(dialect: &'static str, dir: &Path, lines: &[String]) -> Result<(), TestCaseError> {
    let file = dir.join("replay.txt");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let session = tokio::time::timeout(
        Duration::from_secs(15),
        driver_start(dialect, request(dialect, dir)),
    )
    .await
    .map_err(|_| TestCaseError::fail("start timed out"))?
    .map_err(|e| TestCaseError::fail(format!("start failed: {e}")))?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Permissions and questions the junk asks are dropped: tether answers "cancelled".
    let drain = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(ev) = rx.recv().await {
            if let AgentEvent::Permission(p) = ev {
                drop(p.reply);
            }
            n += 1;
        }
        n
    });
    let prompt = format!("replay {}", file.display());
    let turn = session.prompt(&prompt, tx);
    tokio::pin!(turn);
    let ended = tokio::select! {
        r = &mut turn => Some(r),
        () = tokio::time::sleep(Duration::from_secs(10)) => None,
    };
    let outcome = match ended {
        Some(r) => r,
        None => {
            // Junk may have confused the turn's bookkeeping: cancel, then shut down; the
            // turn must end either way.
            let _ = tokio::time::timeout(Duration::from_secs(2), session.cancel()).await;
            let ended = tokio::select! {
                r = &mut turn => Some(r),
                () = tokio::time::sleep(Duration::from_secs(3)) => None,
            };
            match ended {
                Some(r) => r,
                None => {
                    let (r, ()) = tokio::time::timeout(Duration::from_secs(10), async {
                        tokio::join!(&mut turn, session.shutdown())
                    })
                    .await
                    .map_err(|_| TestCaseError::fail("the turn did not end at shutdown"))?;
                    r
                }
            }
        }
    };
    let summary = match &outcome {
        Ok(o) if o.text.contains("replay done") => "completed".to_string(),
        Ok(o) => format!("ended early ({:?})", o.stop_reason),
        // Every error has a stable code (the match is exhaustive inside the crate).
        Err(e) => format!(
            "{:?}: {}",
            e.code(),
            e.to_string().chars().take(120).collect::<String>()
        ),
    };
    *STATS.lock().unwrap().entry((dialect, summary)).or_default() += 1;
    tokio::time::timeout(Duration::from_secs(10), session.shutdown())
        .await
        .map_err(|_| TestCaseError::fail("shutdown hung"))?;
    assert!(!session.is_alive(), "the process is reaped");
    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    Ok(())
}

fn run_dialect(dialect: &'static str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    });
    let lines = prop::collection::vec(line(dialect), 1..24);
    runner
        .run(&lines, |lines| {
            rt.block_on(case(dialect, dir.path(), &lines))
        })
        .unwrap_or_else(|e| panic!("{dialect}: {e}"));
    // After all that, a clean turn still works.
    rt.block_on(async {
        let s = driver_start(dialect, request(dialect, dir.path()))
            .await
            .unwrap();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let out = tokio::time::timeout(Duration::from_secs(10), s.prompt("hello", tx))
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.text.starts_with("echo: hello"),
            "{dialect}: {}",
            out.text
        );
        s.shutdown().await;
    });
    let stats = STATS.lock().unwrap();
    let mine: Vec<_> = stats.iter().filter(|((d, _), _)| *d == dialect).collect();
    eprintln!("{dialect}: {mine:?}");
}

#[test]
fn acp_reader_survives_hostile_lines() {
    run_dialect("acp");
}

#[test]
fn codex_reader_survives_hostile_lines() {
    run_dialect("codex");
}

#[test]
fn claude_reader_survives_hostile_lines() {
    run_dialect("claude");
}
