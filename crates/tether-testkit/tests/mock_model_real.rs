//! The mock model server against the real CLIs, run directly (not through tether):
//! `codex exec --json`, `claude -p --output-format json`, `gemini -p`. Proves the mock's
//! streams are accepted and its scripting (text, shell, patch, history) works end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tether_testkit::mock_model::Last;
use tether_testkit::real_agents::{claude_env, cli_command, codex_env, codex_home, gemini_env};
use tether_testkit::{Api, MockModel, Reply};

/// Limit for one CLI run (start-up included).
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    /// stdout as JSON lines (non-JSON lines skipped).
    fn jsonl(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

async fn run(
    cli: &str,
    env: &BTreeMap<String, String>,
    cwd: &std::path::Path,
    args: &[&str],
) -> Run {
    let mut cmd = cli_command(cli, env);
    cmd.args(args).current_dir(cwd);
    let out = tokio::time::timeout(RUN_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{cli} {args:?} timed out"))
        .unwrap_or_else(|e| panic!("spawn {cli}: {e}"));
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

// ---- codex (OpenAI Responses) ----

struct Codex {
    mock: MockModel,
    _home: tempfile::TempDir,
    work: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

impl Codex {
    async fn new() -> Codex {
        let mock = MockModel::start().await;
        let home = codex_home(&mock.base_url());
        let env = codex_env(home.path());
        Codex {
            mock,
            _home: home,
            work: tempfile::tempdir().unwrap(),
            env,
        }
    }

    async fn exec(&self, extra: &[&str], prompt: &str) -> (Run, Vec<Value>) {
        let mut args = vec!["exec", "--json", "--skip-git-repo-check"];
        args.extend_from_slice(extra);
        args.push(prompt);
        let r = run("codex", &self.env, self.work.path(), &args).await;
        let events = r.jsonl();
        (r, events)
    }
}

fn agent_messages(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .map(|e| e["item"]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

fn thread_id(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "thread.started")
        .and_then(|e| e["thread_id"].as_str())
        .unwrap_or_else(|| panic!("no thread.started in {events:?}"))
        .to_string()
}

#[tokio::test]
async fn codex_exec_text_reply_and_resumed_history() {
    let c = Codex::new().await;
    let (r, events) = c.exec(&[], "hello there").await;
    assert!(r.ok, "codex failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(
        agent_messages(&events),
        ["mock reply to: hello there (turn 1)"]
    );
    assert!(events.iter().any(|e| e["type"] == "turn.completed"));
    let reqs = c.mock.main_requests(Api::OpenAiResponses);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/responses");
    assert_eq!(reqs[0].user_texts(), ["hello there"]);

    // A second turn in the same thread carries the first exchange.
    let id = thread_id(&events);
    let (r, events) = c.exec(&["resume", &id], "second").await;
    assert!(r.ok, "codex resume failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(agent_messages(&events), ["mock reply to: second (turn 2)"]);
    assert_eq!(c.mock.last_user_texts(), ["hello there", "second"]);
    let last = c.mock.main_requests(Api::OpenAiResponses).pop().unwrap();
    assert_eq!(
        last.assistant_texts(),
        ["mock reply to: hello there (turn 1)"]
    );
}

#[tokio::test]
async fn codex_exec_shell_tool_round_trip() {
    let c = Codex::new().await;
    let (r, events) = c.exec(&[], "shell echo hello-shell; echo two").await;
    assert!(r.ok, "codex failed: {}\n{}", r.stdout, r.stderr);
    let cmd = events
        .iter()
        .find(|e| e["type"] == "item.completed" && e["item"]["type"] == "command_execution")
        .unwrap_or_else(|| panic!("no command_execution in {events:?}"));
    assert_eq!(cmd["item"]["exit_code"], 0);
    assert!(
        cmd["item"]["aggregated_output"]
            .as_str()
            .unwrap()
            .contains("hello-shell\ntwo"),
        "{cmd}"
    );
    assert_eq!(agent_messages(&events), ["done: hello-shell"]);
    let reqs = c.mock.main_requests(Api::OpenAiResponses);
    assert_eq!(
        reqs.len(),
        2,
        "one request for the call, one with its result"
    );
    match reqs[1].transcript().last {
        Last::ToolResult { name, output } => {
            assert_eq!(name, "exec_command");
            assert!(output.contains("hello-shell"), "{output}");
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
}

#[tokio::test]
async fn codex_exec_apply_patch_creates_the_file() {
    let c = Codex::new().await;
    let (r, events) = c
        .exec(
            &["--sandbox", "workspace-write"],
            "patch sub/new.txt hello patch",
        )
        .await;
    assert!(r.ok, "codex failed: {}\n{}", r.stdout, r.stderr);
    let text = std::fs::read_to_string(c.work.path().join("sub/new.txt")).unwrap();
    assert_eq!(text, "hello patch\n");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "item.completed" && e["item"]["type"] == "file_change"),
        "{events:?}"
    );
    assert_eq!(
        agent_messages(&events),
        ["done: Success. Updated the following files:"]
    );
}

#[tokio::test]
async fn codex_exec_scripted_reply_then_error_mode() {
    let c = Codex::new().await;
    c.mock.script([Reply::Text("scripted answer".into())]);
    let (r, events) = c.exec(&[], "anything").await;
    assert!(r.ok, "codex failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(agent_messages(&events), ["scripted answer"]);

    c.mock.set_error_mode(Some(500));
    let (r, events) = c.exec(&[], "hello").await;
    assert!(!r.ok, "codex should fail on a 500");
    assert!(
        events.iter().any(|e| e["type"] == "turn.failed"),
        "{events:?}"
    );
    assert!(agent_messages(&events).is_empty());
}

// ---- claude (Anthropic Messages) ----

struct Claude {
    mock: MockModel,
    _config: tempfile::TempDir,
    work: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

impl Claude {
    async fn new() -> Claude {
        let mock = MockModel::start().await;
        let config = tempfile::tempdir().unwrap();
        let env = claude_env(&mock.base_url(), config.path());
        Claude {
            mock,
            _config: config,
            work: tempfile::tempdir().unwrap(),
            env,
        }
    }

    /// `claude -p PROMPT --output-format json EXTRA...`; returns the result object.
    async fn print(&self, prompt: &str, extra: &[&str]) -> (Run, Value) {
        let mut args = vec!["-p", prompt, "--output-format", "json"];
        args.extend_from_slice(extra);
        let r = run("claude", &self.env, self.work.path(), &args).await;
        let result = r
            .jsonl()
            .into_iter()
            .find(|v| v["type"] == "result")
            .unwrap_or_else(|| panic!("no result: {}\n{}", r.stdout, r.stderr));
        (r, result)
    }
}

#[tokio::test]
async fn claude_print_text_reply_and_resumed_history() {
    let c = Claude::new().await;
    let (r, result) = c.print("hello there", &[]).await;
    assert!(r.ok, "claude failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], "mock reply to: hello there (turn 1)");
    let reqs = c.mock.main_requests(Api::AnthropicMessages);
    assert_eq!(reqs.len(), 1, "{:?}", c.mock.requests());
    assert_eq!(reqs[0].path, "/v1/messages?beta=true");
    assert_eq!(reqs[0].user_texts(), ["hello there"]);

    let session = result["session_id"].as_str().unwrap().to_string();
    let (r, result) = c.print("second", &["--resume", &session]).await;
    assert!(r.ok, "claude resume failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(result["result"], "mock reply to: second (turn 2)");
    assert_eq!(result["session_id"], session.as_str());
    let last = c.mock.main_requests(Api::AnthropicMessages).pop().unwrap();
    assert_eq!(last.user_texts(), ["hello there", "second"]);
    assert_eq!(
        last.assistant_texts(),
        ["mock reply to: hello there (turn 1)"]
    );
}

#[tokio::test]
async fn claude_print_bash_and_write_tools() {
    let c = Claude::new().await;
    let (r, result) = c
        .print(
            "shell echo hello-shell; echo two",
            &["--allowedTools", "Bash"],
        )
        .await;
    assert!(r.ok, "claude failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(result["result"], "done: hello-shell");
    let reqs = c.mock.main_requests(Api::AnthropicMessages);
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].transcript().last,
        Last::ToolResult {
            name: "Bash".into(),
            output: "hello-shell\ntwo".into()
        }
    );

    let (r, result) = c
        .print(
            "patch made.txt made by claude",
            &["--allowedTools", "Write"],
        )
        .await;
    assert!(r.ok, "claude failed: {}\n{}", r.stdout, r.stderr);
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .starts_with("done: File created successfully"),
        "{result}"
    );
    let text = std::fs::read_to_string(c.work.path().join("made.txt")).unwrap();
    assert_eq!(text, "made by claude\n");
}

#[tokio::test]
async fn claude_print_error_status_is_reported() {
    let c = Claude::new().await;
    let (_, result) = c.print("error 400", &[]).await;
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["api_error_status"], 400, "{result}");
}

// ---- gemini (Gemini API) ----

struct Gemini {
    mock: MockModel,
    _home: tempfile::TempDir,
    work: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

impl Gemini {
    async fn new() -> Gemini {
        let mock = MockModel::start().await;
        let home = tempfile::tempdir().unwrap();
        let env = gemini_env(&mock.base_url(), home.path());
        Gemini {
            mock,
            _home: home,
            work: tempfile::tempdir().unwrap(),
            env,
        }
    }

    /// `gemini EXTRA... -p PROMPT -o json`; returns the JSON output.
    async fn print(&self, prompt: &str, extra: &[&str]) -> (Run, Value) {
        let mut args = extra.to_vec();
        args.extend_from_slice(&["-p", prompt, "-o", "json"]);
        let r = run("gemini", &self.env, self.work.path(), &args).await;
        let start = r.stdout.find('{').unwrap_or(0);
        let out = serde_json::from_str(&r.stdout[start..])
            .unwrap_or_else(|e| panic!("gemini output ({e}): {}\n{}", r.stdout, r.stderr));
        (r, out)
    }
}

#[tokio::test]
async fn gemini_print_text_reply_and_resumed_history() {
    let g = Gemini::new().await;
    let (r, out) = g.print("hello there", &[]).await;
    assert!(r.ok, "gemini failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(out["response"], "mock reply to: hello there (turn 1)");
    let main = g.mock.main_requests(Api::Gemini);
    assert_eq!(main.len(), 1, "{:?}", g.mock.requests());
    assert!(
        main[0].path.contains(":streamGenerateContent"),
        "{}",
        main[0].path
    );
    assert_eq!(main[0].user_texts(), ["hello there"]);

    let session = out["session_id"].as_str().unwrap().to_string();
    let (r, out) = g.print("second", &["--resume", &session]).await;
    assert!(r.ok, "gemini resume failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(out["response"], "mock reply to: second (turn 2)");
    let last = g.mock.main_requests(Api::Gemini).pop().unwrap();
    assert_eq!(last.user_texts(), ["hello there", "second"]);
    assert_eq!(
        last.assistant_texts(),
        ["mock reply to: hello there (turn 1)"]
    );
}

#[tokio::test]
async fn gemini_print_shell_and_write_tools() {
    let g = Gemini::new().await;
    let (r, out) = g
        .print("shell echo hello-shell; echo two", &["--yolo"])
        .await;
    assert!(r.ok, "gemini failed: {}\n{}", r.stdout, r.stderr);
    assert_eq!(out["response"], "done: hello-shell");
    let main = g.mock.main_requests(Api::Gemini);
    assert_eq!(main.len(), 2);
    match main[1].transcript().last {
        Last::ToolResult { name, output } => {
            assert_eq!(name, "run_shell_command");
            assert!(output.contains("hello-shell\ntwo"), "{output}");
        }
        other => panic!("expected a tool result, got {other:?}"),
    }

    let (r, out) = g.print("patch gem.txt made by gemini", &["--yolo"]).await;
    assert!(r.ok, "gemini failed: {}\n{}", r.stdout, r.stderr);
    assert!(
        out["response"]
            .as_str()
            .unwrap()
            .starts_with("done: Successfully created"),
        "{out}"
    );
    let text = std::fs::read_to_string(g.work.path().join("gem.txt")).unwrap();
    assert_eq!(text, "made by gemini\n");
}

// ---- the mock itself over HTTP ----

#[tokio::test]
async fn slow_stream_spaces_its_deltas_in_every_api() {
    let mock = MockModel::start().await;
    let client = reqwest::Client::new();
    let cases = [
        (
            "/v1/responses",
            serde_json::json!({"stream": true, "input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "slow 3 100"}]}]}),
        ),
        (
            "/v1/messages",
            serde_json::json!({"stream": true, "messages": [{"role": "user", "content": "slow 3 100"}],
                "tools": [{"name": "Bash"}]}),
        ),
        (
            "/v1beta/models/m:streamGenerateContent?alt=sse",
            serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "slow 3 100"}]}]}),
        ),
    ];
    for (path, body) in cases {
        let started = std::time::Instant::now();
        let resp = tokio::time::timeout(
            RUN_TIMEOUT,
            client
                .post(format!("{}{path}", mock.base_url()))
                .json(&body)
                .send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let text = tokio::time::timeout(RUN_TIMEOUT, resp.text())
            .await
            .unwrap()
            .unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(200), "{path}: {elapsed:?}");
        for i in 1..=3 {
            assert!(text.contains(&format!("part {i} ")), "{path}: {text}");
        }
    }
    assert_eq!(mock.requests().len(), 3);

    mock.set_error_mode(Some(503));
    let resp = tokio::time::timeout(
        RUN_TIMEOUT,
        client
            .post(format!("{}/v1/messages", mock.base_url()))
            .json(&serde_json::json!({"messages": []}))
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(resp.status(), 503);
}
