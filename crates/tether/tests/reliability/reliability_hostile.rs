//! Reliability: hostile input to a real daemon over HTTP. Random bodies, paths and
//! queries on every API route (property-tested, bounded) get a JSON 4xx, never a 5xx;
//! path traversal in `cwd` and delegation `working_dir`, oversized bodies and wrong
//! tokens are refused; the API token and configured secrets never appear in API
//! responses or in the daemon's log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::reliability_util;

use std::time::Duration;

use crate::reliability_util::{assert_healthy, turn_once};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use tether_testkit::{Daemon, DaemonOptions, within};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 32,
        ..Config::default()
    })
}

/// Status and body text of a raw request.
async fn send(
    d: &Daemon,
    method: &str,
    path: &str,
    body: Vec<u8>,
    content_type: Option<&str>,
    token: Option<&str>,
) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = d.client.request(method, d.url(path)).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = within("request", req.send())
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = resp.status().as_u16();
    let text = within("body", resp.text()).await.unwrap_or_default();
    (status, text)
}

/// A 4xx/5xx must be `{"error": {"code": "...", "message": "..."}}`.
fn check_error_body(status: u16, text: &str, what: &str) -> Result<(), TestCaseError> {
    if status < 400 {
        return Ok(());
    }
    let body: Value = serde_json::from_str(text)
        .map_err(|_| TestCaseError::fail(format!("{what}: {status} body is not JSON: {text:?}")))?;
    let code = body["error"]["code"].as_str().unwrap_or_default();
    prop_assert!(
        !code.is_empty(),
        "{}: {} without a code: {}",
        what,
        status,
        text
    );
    prop_assert!(body["error"]["message"].is_string(), "{}: {}", what, text);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Random requests on every route.

const KEYS: &[&str] = &[
    "text",
    "agent",
    "model",
    "cwd",
    "title",
    "archived",
    "decision",
    "answer",
    "message",
    "continuation_id",
    "task",
    "task_id",
    "task_ids",
    "working_dir",
    "agent_type",
    "wait_ms",
    "jsonrpc",
    "id",
    "method",
    "params",
    "name",
    "arguments",
    "limit",
    "after",
    "after_seq",
];

/// Words safe to send as prompts (no fake-agent directive that keeps a CPU busy).
fn safe_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        prop::sample::select(vec![
            "hello",
            "/new",
            "/new fake",
            "/new nobody task",
            "/approve",
            "/deny x",
            "/stop",
            "/status",
            "/detach",
            "/agent fake2",
            "/agent nobody",
            "/model m",
            "/model",
            "/sessions",
            "/help",
            "//compact",
            "/frobnicate",
            "",
            "   ",
            "approve it",
            "ask colour?",
            "sleep 10",
            "fail",
            "crash",
            "garbage",
        ])
        .prop_map(str::to_owned),
        "[a-z ]{0,2000}",
    ]
    .prop_filter("no CPU-burning directive", |t| {
        !matches!(
            t.split_whitespace().next(),
            Some("flood" | "bigline" | "replay" | "stream" | "mcp")
        )
    })
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        safe_text().prop_map(Value::from),
        prop::sample::select(vec![
            "fake",
            "fake2",
            "nobody",
            "allow",
            "allow_always",
            "deny",
            "maybe",
            "/etc",
            "..",
            "/tmp/../etc",
            "tools/call",
            "2.0",
            "delegate_to_agent",
        ])
        .prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (prop::sample::select(KEYS).prop_map(str::to_owned), inner),
                0..5
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        5 => json_value().prop_map(|v| v.to_string().into_bytes()),
        2 => prop::collection::vec((prop::sample::select(KEYS), leaf()), 0..4).prop_map(|kv| {
            let m: Map<String, Value> = kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            Value::Object(m).to_string().into_bytes()
        }),
        1 => (json_value(), any::<prop::sample::Index>()).prop_map(|(v, i)| {
            let s = v.to_string().into_bytes();
            let cut = i.index(s.len() + 1);
            s[..cut].to_vec()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..200),
        1 => Just(Vec::new()),
    ]
}

/// A path segment: a real id, or something hostile.
fn segment(real: Vec<String>) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(real),
        1 => "[a-zA-Z0-9_%.~-]{0,40}",
        1 => prop::sample::select(vec![
            "..", "%2e%2e", "%00", "%ff%fe", "a%2Fb", "%252e", "null", "-1",
            "99999999999999999999999999",
        ])
        .prop_map(str::to_owned),
        1 => "x{300,3000}",
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        prop::collection::vec(
            (
                prop::sample::select(vec![
                    "limit",
                    "after",
                    "after_seq",
                    "before",
                    "status",
                    "conversation_id",
                    "token",
                    "archived",
                    "kind",
                ]),
                prop_oneof![
                    "-?[0-9]{1,25}".boxed(),
                    "[a-z%&=]{0,12}".boxed(),
                    Just("true".to_string()).boxed(),
                ],
            ),
            1..4,
        )
        .prop_map(|kv| {
            let parts: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("?{}", parts.join("&"))
        }),
    ]
}

const ROUTES: &[(&str, &str)] = &[
    ("POST", "/api/v1/conversations"),
    ("GET", "/api/v1/conversations"),
    ("GET", "/api/v1/conversations/{c}"),
    ("PATCH", "/api/v1/conversations/{c}"),
    ("POST", "/api/v1/conversations/{c}/messages"),
    ("GET", "/api/v1/conversations/{c}/messages"),
    ("POST", "/api/v1/conversations/{c}/new-session"),
    ("POST", "/api/v1/conversations/{c}/detach"),
    ("POST", "/api/v1/conversations/{c}/stop"),
    ("GET", "/api/v1/conversations/{c}/continuation"),
    ("POST", "/api/v1/conversations/{c}/continue"),
    ("POST", "/api/v1/conversations/{c}/close"),
    ("GET", "/api/v1/conversations/{c}/delegations"),
    ("GET", "/api/v1/sessions/{s}"),
    ("GET", "/api/v1/sessions/{s}/turns"),
    ("GET", "/api/v1/sessions/{s}/events"),
    ("GET", "/api/v1/approvals"),
    ("POST", "/api/v1/approvals/{a}"),
    ("GET", "/api/v1/questions"),
    ("POST", "/api/v1/questions/{q}"),
    ("GET", "/api/v1/pool"),
    ("GET", "/api/v1/agents"),
    ("POST", "/mcp"),
    ("DELETE", "/api/v1/conversations/{c}"),
    ("PUT", "/api/v1/approvals/{a}"),
    ("POST", "/api/v1/{c}"),
    ("GET", "/api/v2/{c}"),
];

#[derive(Debug, Clone)]
struct Req {
    method: &'static str,
    path: String,
    body: Vec<u8>,
    content_type: Option<&'static str>,
}

fn request(ids: &Ids) -> impl Strategy<Value = Req> {
    (
        prop::sample::select(ROUTES),
        segment(ids.conversations.clone()),
        segment(ids.sessions.clone()),
        segment(ids.approvals.clone()),
        segment(ids.questions.clone()),
        query(),
        body(),
        prop::sample::select(vec![
            Some("application/json"),
            Some("application/json"),
            Some("application/json"),
            Some("text/plain"),
            Some("application/json; charset=utf-16"),
            Some("multipart/form-data; boundary=x"),
            None,
        ]),
    )
        .prop_map(|((method, template), c, s, a, q, query, body, ct)| Req {
            method,
            path: format!(
                "{}{query}",
                template
                    .replace("{c}", &c)
                    .replace("{s}", &s)
                    .replace("{a}", &a)
                    .replace("{q}", &q)
            ),
            body,
            content_type: ct,
        })
}

/// Real ids to aim at (so random bodies reach the handlers' logic).
#[derive(Debug, Clone)]
struct Ids {
    conversations: Vec<String>,
    sessions: Vec<String>,
    approvals: Vec<String>,
    questions: Vec<String>,
}

async fn prepare(d: &Daemon) -> Ids {
    let mut ids = Ids {
        conversations: Vec::new(),
        sessions: Vec::new(),
        approvals: Vec::new(),
        questions: Vec::new(),
    };
    for prompt in ["hello", "approve something risky", "ask what colour?"] {
        let c = d.new_conversation(None).await;
        let out = d.say(&c, prompt).await;
        ids.sessions
            .push(out["session_id"].as_str().unwrap().to_string());
        ids.conversations.push(c);
    }
    let (c1, c2) = (ids.conversations[1].clone(), ids.conversations[2].clone());
    let a = reliability_util::eventually("an approval is pending", || async {
        let v = d.get_ok(&format!("/api/v1/conversations/{c1}")).await;
        v["pending_approvals"][0].as_str().map(str::to_owned)
    })
    .await;
    let q = reliability_util::eventually("a question is pending", || async {
        let v = d.get_ok(&format!("/api/v1/conversations/{c2}")).await;
        v["pending_questions"][0].as_str().map(str::to_owned)
    })
    .await;
    ids.approvals.push(a);
    ids.questions.push(q);
    ids
}

#[test]
fn hostile_http_requests_get_a_json_4xx_never_a_5xx() {
    let rt = runtime();
    let d = rt.block_on(Daemon::start(DaemonOptions {
        queue_cap: 4,
        ..Default::default()
    }));
    let ids = rt.block_on(prepare(&d));
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    let counts = std::sync::Mutex::new(&mut statuses);
    runner(384)
        .run(&request(&ids), |r| {
            rt.block_on(async {
                let (status, text) = send(
                    &d,
                    r.method,
                    &r.path,
                    r.body.clone(),
                    r.content_type,
                    Some(&d.token),
                )
                .await;
                *counts.lock().unwrap().entry(status).or_default() += 1;
                let what = format!("{} {}", r.method, r.path);
                let retry_later = status == 503 && text.contains("\"rebuilding\"");
                prop_assert!(
                    status < 500 || retry_later,
                    "{}: {} {} (body {:?})",
                    what,
                    status,
                    text,
                    String::from_utf8_lossy(&r.body)
                );
                check_error_body(status, &text, &what)
            })
        })
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("statuses: {statuses:?}");
    rt.block_on(async {
        assert_healthy(&d, "fake").await;
        drop(d);
    });
}

// ---------------------------------------------------------------------------------------
// Paths, sizes, tokens.

#[tokio::test]
async fn hostile_working_directories_are_refused_for_conversations_and_delegations() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let work = d.work_dir();
    std::fs::create_dir_all(work.join("inside")).unwrap();
    // A symlink inside the workspace that points out of it.
    std::os::unix::fs::symlink("/etc", work.join("escape")).unwrap();
    std::os::unix::fs::symlink(work.join("inside"), work.join("fine-link")).unwrap();
    let w = work.display().to_string();
    let hostile = [
        "/etc".to_string(),
        "/".to_string(),
        "..".to_string(),
        "relative/dir".to_string(),
        format!("{w}/.."),
        format!("{w}/../.."),
        format!("{w}/inside/../../.."),
        format!("{w}/escape"),
        format!("{w}/escape/ssl"),
        format!("{w}/missing"),
        format!("{w}/inside\0/etc"),
        format!("{w}%2f..%2f.."),
        format!("{w}/inside/../../{}", w.rsplit('/').next().unwrap()) + "-other",
        "~".to_string(),
        "".to_string(),
        format!("{}{}", w, "/x".repeat(3000)),
    ];
    for cwd in &hostile {
        let (status, body) = d.post("/api/v1/conversations", json!({ "cwd": cwd })).await;
        if cwd.is_empty() && status == 201 {
            // An empty cwd means the default one.
            assert_eq!(body["cwd"], w, "{body}");
            continue;
        }
        assert_eq!(status, 400, "cwd {cwd:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_cwd", "cwd {cwd:?}: {body}");
    }
    // Inside, also through a symlink that stays inside, is fine.
    for cwd in [
        format!("{w}/inside"),
        format!("{w}/fine-link"),
        format!("{w}/inside/../inside"),
    ] {
        let c = d
            .post_ok("/api/v1/conversations", json!({ "cwd": cwd }))
            .await;
        assert_eq!(c["cwd"], format!("{w}/inside"), "{c}");
    }

    // Delegation: the same paths as `working_dir` of `delegate_to_agent` (called by the
    // fake agent over tether's MCP server).
    let parent = d.new_conversation(None).await;
    for dir in hostile
        .iter()
        .filter(|h| !h.is_empty() && !h.contains('\0'))
    {
        let args = json!({"agent_type": "fake", "task": "hello", "working_dir": dir});
        let (_, t) = turn_once(&d, &parent, &format!("mcp delegate_to_agent {args}")).await;
        assert_eq!(t["status"], "completed", "{t}");
        let text = t["result_text"].as_str().unwrap();
        assert!(
            text.contains("invalid_working_dir"),
            "working_dir {dir:?}: {text}"
        );
    }
    let args =
        json!({"agent_type": "fake", "task": "hello", "working_dir": format!("{w}/fine-link")});
    let (_, t) = turn_once(&d, &parent, &format!("mcp delegate_to_agent {args}")).await;
    assert!(
        t["result_text"].as_str().unwrap().contains("\"task_id\""),
        "{t}"
    );
    assert_healthy(&d, "fake").await;
}

#[tokio::test]
async fn oversized_bodies_and_wrong_tokens_are_refused_with_json_errors() {
    // Every kind of wrong token on every kind of route: more than the guessing limit
    // allows in a minute (that limit has its own test, `api_teams`).
    let d = Daemon::start(DaemonOptions {
        extra_config: "[server]\ntoken_failures_per_minute = 0\n".into(),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let msgs = format!("/api/v1/conversations/{c}/messages");

    // Oversized: declared (Content-Length) and streamed (chunked, no length), on a
    // protected route; the daemon is fine afterwards.
    // A client of its own: the server closes these connections after the 413, and a
    // pooled one must not be reused by the checks that follow.
    let oversize = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let big = vec![b'x'; 2 * 1024 * 1024 + 17];
    let mut body = b"{\"text\": \"".to_vec();
    body.extend_from_slice(&big);
    body.extend_from_slice(b"\"}");
    match oversize
        .post(d.url(&msgs))
        .bearer_auth(&d.token)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
    {
        Ok(resp) => {
            assert_eq!(resp.status().as_u16(), 413);
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
        }
        // The server may answer and close before the client has written everything.
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let stream = futures::stream::iter(chunks);
    match oversize
        .post(d.url(&msgs))
        .bearer_auth(&d.token)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
    {
        Ok(resp) => {
            assert_eq!(resp.status().as_u16(), 413);
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["error"]["code"], "payload_too_large", "{v}");
        }
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    // Nothing of it reached the conversation.
    let history = d.get_ok(&msgs).await;
    assert_eq!(history.as_array().unwrap().len(), 0, "{history}");
    // Just under the limit is a message (or a clean 4xx), never an error of ours.
    let text = "y".repeat(1024 * 1024 - 64);
    let (status, body) = d.post(&msgs, json!({ "text": text })).await;
    assert!(status < 500, "{status}: {body}");

    // Wrong tokens, on every kind of route.
    let token = d.token.clone();
    let upper = token.to_uppercase();
    let longer = format!("{token}x");
    let shorter = token[..token.len() - 1].to_string();
    let bad_tokens: Vec<Option<&str>> = vec![
        None,
        Some(""),
        Some("nope"),
        Some(&longer),
        Some(&shorter),
        Some(&upper),
        Some(" "),
    ];
    let routes = [
        ("GET", "/api/v1/conversations".to_string()),
        ("POST", "/api/v1/conversations".to_string()),
        ("POST", msgs.clone()),
        ("GET", format!("/api/v1/conversations/{c}/events")),
        ("GET", "/api/v1/pool".to_string()),
        ("POST", "/mcp".to_string()),
    ];
    for (method, path) in &routes {
        for t in &bad_tokens {
            if *t == Some(upper.as_str()) && upper == token {
                continue;
            }
            let (status, text) = send(
                &d,
                method,
                path,
                b"{\"text\":\"hi\"}".to_vec(),
                Some("application/json"),
                *t,
            )
            .await;
            assert_eq!(status, 401, "{method} {path} with {t:?}: {text}");
            if path != "/mcp" {
                check_error_body(status, &text, path).unwrap();
                assert!(text.contains("unauthorized"), "{text}");
            }
        }
    }
    // Other schemes, and the token where it does not belong.
    for header in [
        format!("Basic {token}"),
        format!("bearer{token}"),
        format!("Token {token}"),
        token.clone(),
    ] {
        let resp = d
            .client
            .get(d.url("/api/v1/conversations"))
            .header("authorization", header.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{header}");
    }
    let (status, _) = send(
        &d,
        "GET",
        &format!("/api/v1/conversations?token={token}"),
        Vec::new(),
        None,
        None,
    )
    .await;
    assert_eq!(status, 401, "?token= only works for the event stream");
    let (status, _) = send(
        &d,
        "GET",
        &format!("/api/v1/conversations/{c}/events?token=wrong"),
        Vec::new(),
        None,
        None,
    )
    .await;
    assert_eq!(status, 401);
    // Nothing was created by all that.
    let list = d.get_ok("/api/v1/conversations").await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_healthy(&d, "fake").await;
}

// ---------------------------------------------------------------------------------------
// Secrets.

const VERIFY: &str = "verify-SECRET-3141";
const ENCRYPT: &str = "encrypt-SECRET-2718";
const AGENT_SECRET: &str = "sk-agent-SECRET-1618";
const ANN: (i64, &str) = (111, "Ann");
const EVE: (i64, &str) = (666, "Eve");

#[tokio::test]
async fn secrets_never_appear_in_api_responses_or_logs() {
    use tether_testkit::fake_feishu::{Events, FakeFeishu};
    use tether_testkit::fake_telegram::{self, Failure, FakeTelegram, private_chat};

    let tg = FakeTelegram::start().await;
    let fs = FakeFeishu::start().await;
    let ev = Events::new(VERIFY, Some(ENCRYPT));
    let feishu = fs.config(&ev, &["ou_ann"], "");
    let feishu = &feishu[feishu.find("[channels.feishu]").unwrap()..];
    let extra = format!(
        "{}{feishu}\n[agents.fake.env]\nOPENAI_API_KEY = {AGENT_SECRET:?}\n",
        tg.config(&[ANN.0], "")
    );
    let mut d = Daemon::start(DaemonOptions {
        extra_config: extra,
        capture_stderr: true,
        log_filter: "debug".to_string(),
        ..Default::default()
    })
    .await;
    let mut seen = String::new();
    let mut record = |what: &str, status: u16, body: &str| {
        seen.push_str(&format!("{what} {status} {body}\n"));
    };

    // Telegram: a conversation, a failed send that is retried, an unknown sender.
    tg.fail("sendMessage", "echo: tell me", &[Failure::ServerError]);
    tg.say(&private_chat(ANN.0), ANN, "tell me a secret");
    tg.wait_shown(ANN.0, "echo: tell me a secret").await;
    tg.say(&private_chat(EVE.0), EVE, "let me in");
    tg.wait_shown(EVE.0, "pairing code").await;
    // Feishu: a signed message, a forged one, a tampered one.
    let sealed = ev.seal(&ev.message("oc_1", "p2p", "ou_ann", "hello feishu", false));
    let post = |body: Vec<u8>, headers: Vec<(&'static str, String)>| {
        let mut req = d.client.post(d.url("/hooks/feishu")).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };
    let r = post(sealed.body.clone(), sealed.headers.clone())
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    fs.wait_shown("oc_1", "echo: hello feishu").await;
    let mut forged = sealed.headers.clone();
    forged[2].1 = "0".repeat(64);
    let r = post(sealed.body.clone(), forged).await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let mut tampered = sealed.body.clone();
    let mid = tampered.len() / 2;
    tampered[mid] ^= 1;
    let r = post(tampered, sealed.headers.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 401);

    // The API: every read endpoint, errors, the event stream, MCP, the web page.
    let c = d.new_conversation(None).await;
    let (o, _) = turn_once(&d, &c, "echo $OPENAI_API_KEY please").await;
    let sid = o["session_id"].as_str().unwrap().to_string();
    let mut paths = vec![
        "/api/v1/health".to_string(),
        "/api/v1/agents".to_string(),
        "/api/v1/conversations".to_string(),
        format!("/api/v1/conversations/{c}"),
        format!("/api/v1/conversations/{c}/messages"),
        format!("/api/v1/conversations/{c}/continuation"),
        format!("/api/v1/conversations/{c}/delegations"),
        format!("/api/v1/sessions/{sid}"),
        format!("/api/v1/sessions/{sid}/turns"),
        format!("/api/v1/sessions/{sid}/events?limit=1000"),
        "/api/v1/approvals".to_string(),
        "/api/v1/questions".to_string(),
        "/api/v1/pool".to_string(),
        "/api/v1/pairings".to_string(),
        "/api/openapi.json".to_string(),
        "/".to_string(),
        "/nope".to_string(),
    ];
    for conv in d.get_ok("/api/v1/conversations").await.as_array().unwrap() {
        paths.push(format!(
            "/api/v1/conversations/{}/messages",
            conv["id"].as_str().unwrap()
        ));
    }
    for p in &paths {
        let (status, text) = send(&d, "GET", p, Vec::new(), None, Some(&d.token)).await;
        record(p, status, &text);
    }
    for (p, body) in [
        ("/api/v1/conversations", json!({"agent": "nobody"})),
        ("/api/v1/conversations", json!({"cwd": "/etc"})),
        (
            &format!("/api/v1/conversations/{c}/messages") as &str,
            json!({"text": "/frobnicate"}),
        ),
        ("/api/v1/approvals/nope", json!({"decision": "allow"})),
    ] {
        let (status, body) = d.post(p, body).await;
        record(p, status, &body.to_string());
    }
    let (status, text) = send(
        &d,
        "GET",
        "/api/v1/conversations",
        Vec::new(),
        None,
        Some("wrong"),
    )
    .await;
    record("wrong token", status, &text);
    let mcp = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let resp = d
        .client
        .post(d.url("/mcp"))
        .bearer_auth(&d.token)
        .header("accept", "application/json, text/event-stream")
        .json(&mcp)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    for (k, v) in resp.headers() {
        record(k.as_str(), status, v.to_str().unwrap_or_default());
    }
    record("/mcp", status, &resp.text().await.unwrap_or_default());
    let mut sse = d.events(&c, Some("0")).await;
    for _ in 0..3 {
        if let Some(e) = within("an event", sse.next()).await {
            record("sse", 200, &e.data);
        }
    }
    drop(sse);
    // The event stream with the token in the query (as EventSource sends it).
    let resp = d
        .client
        .get(d.url(&format!(
            "/api/v1/conversations/{c}/events?token={}",
            d.token
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    drop(resp);
    // A restart logs recovery and channel start-up again.
    d.restart().await;
    let (status, text) = send(
        &d,
        "GET",
        "/api/v1/conversations",
        Vec::new(),
        None,
        Some(&d.token),
    )
    .await;
    record("after restart", status, &text);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let log = format!("{}\n{}", d.stderr_log(), d.stdout_log());
    assert!(log.contains("DEBUG"), "the log was captured at debug level");
    for expected in ["sendMessage: 500", "wrong signature", "tether listening on"] {
        assert!(log.contains(expected), "the log mentions {expected:?}");
    }
    assert!(
        seen.contains("echo $OPENAI_API_KEY please"),
        "responses were recorded"
    );
    for secret in [
        d.token.as_str(),
        fake_telegram::BOT_TOKEN,
        "fake-token",
        tether_testkit::fake_feishu::APP_SECRET,
        VERIFY,
        ENCRYPT,
        AGENT_SECRET,
    ] {
        assert!(!seen.contains(secret), "an API response shows {secret:?}");
        let line = log.lines().find(|l| l.contains(secret));
        assert!(line.is_none(), "the log shows {secret:?}: {line:?}");
    }
}
