//! Reliability: hostile Slack payloads against a real daemon (property-tested, bounded).
//! Over the Events API: events, button payloads and slash commands in Slack's shapes with
//! random values, signed as Slack signs them, tampered, unsigned or signed for another
//! body, never get a 5xx, and only the properly signed ones are accepted. Over Socket
//! Mode: random envelopes and junk frames are all acknowledged or ignored without
//! dropping the connection. Afterwards both still serve a real person.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::reliability_util::assert_healthy;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use tether_testkit::fake_slack::{self, FakeSlack, SIGNING_SECRET};
use tether_testkit::{Daemon, DaemonOptions};

const ANN: &str = "UANN";
/// Only the final check speaks as this user, so junk never queues work in their chat.
const ZOE: &str = "UZOE";

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

/// Prompts that end quickly.
fn text() -> BoxedStrategy<Value> {
    prop_oneof![
        "\\PC{0,30}".prop_map(Value::from),
        prop::sample::select(vec![
            "/new",
            "/status",
            "/stop",
            "/approve",
            "/deny abc",
            "/help",
            "/frobnicate",
            "",
            "<@UTETHERBOT>",
            "<@UTETHERBOT> hi",
            "&lt;&amp;&gt;",
            "<!channel>",
            "fail",
            "crash",
        ])
        .prop_map(Value::from),
    ]
    .boxed()
}

fn scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,10}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
    .boxed()
}

/// An object with `fields`, each with its plausible value, now and then a random one or
/// none instead.
fn object(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let strategies: Vec<BoxedStrategy<(&'static str, Option<Value>)>> = fields
        .into_iter()
        .map(|(k, plausible)| {
            prop_oneof![10 => plausible.prop_map(Some), 2 => scalar().prop_map(Some), 2 => Just(None)]
                .prop_map(move |v| (k, v))
                .boxed()
        })
        .collect();
    strategies
        .prop_map(|kv| {
            Value::Object(
                kv.into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
                    .collect::<Map<String, Value>>(),
            )
        })
        .boxed()
}

fn pick(values: &[&'static str]) -> BoxedStrategy<Value> {
    prop::sample::select(values.to_vec())
        .prop_map(Value::from)
        .boxed()
}

fn event() -> BoxedStrategy<Value> {
    let file = object(vec![
        ("id", pick(&["F1", ""])),
        ("name", pick(&["a.txt", "../../etc/passwd", ""])),
        (
            "url_private_download",
            pick(&[
                "https://evil.example/f",
                "http://127.0.0.1:9/files/F1",
                "files.slack.com",
            ]),
        ),
        ("size", (0u64..100_000_000).prop_map(Value::from).boxed()),
    ]);
    let inner = object(vec![
        (
            "type",
            pick(&["message", "app_mention", "reaction_added", ""]),
        ),
        (
            "subtype",
            pick(&["file_share", "bot_message", "message_changed"]),
        ),
        ("channel", pick(&["D1", "C1", "G1", ""])),
        ("user", pick(&[ANN, "UEVE", "UTETHERBOT", ""])),
        ("text", text()),
        ("ts", pick(&["1.000001", "2.000002", "x", ""])),
        ("thread_ts", pick(&["1.000001", "9.9", ""])),
        (
            "files",
            prop::collection::vec(file, 0..3)
                .prop_map(Value::from)
                .boxed(),
        ),
    ]);
    object(vec![
        (
            "type",
            pick(&["event_callback", "url_verification", "app_rate_limited"]),
        ),
        ("event_id", "Ev[A-Z0-9]{1,10}".prop_map(Value::from).boxed()),
        ("challenge", "\\PC{0,8}".prop_map(Value::from).boxed()),
        ("event", inner),
    ])
}

fn press() -> BoxedStrategy<Value> {
    let action = object(vec![
        (
            "action_id",
            pick(&["tether_decide_allow", "tether_decide_deny", "other"]),
        ),
        (
            "value",
            prop_oneof![
                "\\PC{0,20}".prop_map(Value::from),
                Just(Value::from(r#"{"approval_id":"nope","decision":"allow"}"#)),
                Just(Value::from(r#"{"approval_id":"x","decision":"maybe"}"#)),
            ]
            .boxed(),
        ),
    ]);
    object(vec![
        ("type", pick(&["block_actions", "view_submission"])),
        ("user", object(vec![("id", pick(&[ANN, "UEVE", ""]))])),
        ("channel", object(vec![("id", pick(&["D1", "C1", ""]))])),
        ("trigger_id", "t[0-9]{1,8}".prop_map(Value::from).boxed()),
        (
            "actions",
            prop::collection::vec(action, 0..3)
                .prop_map(Value::from)
                .boxed(),
        ),
    ])
}

fn command() -> BoxedStrategy<Value> {
    object(vec![
        ("command", pick(&["/tether", "/other"])),
        ("channel_id", pick(&["D1", "DANN"])),
        ("user_id", pick(&[ANN, "UEVE", ""])),
        ("trigger_id", "c[0-9]{1,8}".prop_map(Value::from).boxed()),
        ("text", text()),
    ])
}

/// A request body and its content type, as Slack would send it.
fn request() -> BoxedStrategy<(String, bool)> {
    prop_oneof![
        6 => event().prop_map(|e| (e.to_string(), false)),
        2 => press().prop_map(|p| (fake_slack::form(&json!({"payload": p.to_string()})), true)),
        2 => command().prop_map(|c| (fake_slack::form(&c), true)),
        1 => "\\PC{0,40}".prop_map(|t| (t, false)),
        1 => "\\PC{0,40}".prop_map(|t| (t, true)),
    ]
    .boxed()
}

#[test]
fn hostile_slack_requests_never_get_a_5xx_forgeries_are_refused_and_the_bot_keeps_working() {
    let rt = runtime();
    let sl = rt.block_on(FakeSlack::start());
    let d = rt.block_on(Daemon::start(DaemonOptions {
        extra_config: sl.config("events", &[ANN, ZOE], ""),
        ..Default::default()
    }));
    let post = |body: String, form: bool, headers: Vec<(&'static str, String)>| {
        let mut req = d
            .client
            .post(d.url("/hooks/slack"))
            .header(
                "content-type",
                if form {
                    "application/x-www-form-urlencoded"
                } else {
                    "application/json"
                },
            )
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let how = prop::sample::select(vec![
        "signed", "signed", "signed", "tampered", "unsigned", "resigned", "stale",
    ]);
    let mut statuses = std::collections::BTreeMap::<(String, u16), u32>::new();
    let counts = std::sync::Mutex::new(&mut statuses);
    // Signed requests already sent: the same body signed in the same second again is,
    // rightly, a replay.
    let signed = std::sync::Mutex::new(std::collections::HashSet::<(String, i64)>::new());
    runner(200)
        .run(
            &(request(), how, any::<prop::sample::Index>()),
            |((body, form), how, at)| {
                rt.block_on(async {
                    let now = fake_slack::now_secs();
                    let sign =
                        |b: &str, ts: i64| fake_slack::sign(SIGNING_SECRET, ts, b.as_bytes());
                    let (sent, headers) = match how {
                        "signed" => (body.clone(), sign(&body, now)),
                        "tampered" if !body.is_empty() => {
                            let mut b = body.clone().into_bytes();
                            let i = at.index(b.len());
                            b[i] = if b[i] == b'x' { b'y' } else { b'x' };
                            (String::from_utf8_lossy(&b).into_owned(), sign(&body, now))
                        }
                        "resigned" => (body.clone(), sign("{\"other\":1}", now)),
                        "stale" => (body.clone(), sign(&body, now - 400)),
                        _ => (body.clone(), Vec::new()),
                    };
                    let status = post(sent, form, headers).await;
                    *counts
                        .lock()
                        .unwrap()
                        .entry((how.to_string(), status))
                        .or_default() += 1;
                    prop_assert!(status < 500, "{} {}: {}", how, status, body);
                    match how {
                        "signed" if !signed.lock().unwrap().insert((body.clone(), now)) => {
                            prop_assert_eq!(status, 401, "a replay: {}", body)
                        }
                        "signed" => {
                            prop_assert!(status == 200 || status == 400, "{} {}", status, body)
                        }
                        _ => prop_assert_eq!(status, 401, "{}: {}", how, body),
                    }
                    Ok(())
                })
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("slack webhook statuses: {statuses:?}");
    rt.block_on(async {
        let body = sl
            .message("DZOE", ZOE, "after the storm", "99.000001", None)
            .to_string();
        let headers = fake_slack::sign(SIGNING_SECRET, fake_slack::now_secs(), body.as_bytes());
        assert_eq!(post(body, false, headers).await, 200);
        sl.wait_shown("DZOE", "echo: after the storm").await;
        assert_healthy(&d, "fake").await;
    });
    let _guard = rt.enter();
    drop(d);
}

#[test]
fn hostile_socket_mode_envelopes_are_acknowledged_or_ignored_and_the_socket_stays_up() {
    let rt = runtime();
    let sl = rt.block_on(FakeSlack::start());
    let d = rt.block_on(Daemon::start(DaemonOptions {
        extra_config: sl.config("socket", &[ANN, ZOE], ""),
        ..Default::default()
    }));
    rt.block_on(sl.wait_connections(1));
    let envelope = prop_oneof![
        4 => event().prop_map(|p| ("events_api", p)),
        2 => press().prop_map(|p| ("interactive", p)),
        2 => command().prop_map(|p| ("slash_commands", p)),
        1 => scalar().prop_map(|p| ("events_api", p)),
        1 => scalar().prop_map(|p| ("something_new", p)),
    ];
    let junk = prop_oneof![
        "\\PC{0,40}".prop_map(|t| t),
        Just(r#"{"type":"events_api","payload":{}}"#.to_string()),
        Just(r#"{"type":"hello"}"#.to_string()),
        Just("[1,2,3]".to_string()),
    ];
    runner(120)
        .run(
            &(envelope, junk, any::<bool>()),
            |((kind, payload), junk, raw)| {
                if raw {
                    sl.push_raw(&junk);
                } else {
                    sl.push(kind, payload);
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        sl.wait("every envelope acknowledged", |f| {
            f.unacked().is_empty().then_some(())
        })
        .await;
        assert_eq!(sl.connections(), 1, "the junk did not cost the connection");
        sl.push(
            "events_api",
            sl.message("DZOE", ZOE, "after the storm", "99.000001", None),
        );
        sl.wait_shown("DZOE", "echo: after the storm").await;
        assert_healthy(&d, "fake").await;
    });
    let _guard = rt.enter();
    drop(d);
}

#[tokio::test]
async fn slack_secrets_never_reach_the_logs_or_the_api() {
    let sl = FakeSlack::start().await;
    let d = Daemon::start(DaemonOptions {
        extra_config: sl.config("socket", &[ANN], ""),
        capture_stderr: true,
        log_filter: "debug".to_string(),
        ..Default::default()
    })
    .await;
    sl.wait_connections(1).await;
    // A message, a failed send that is retried, a dropped socket, a stranger.
    sl.rate_limit("chat.postMessage", 1, 1);
    sl.push(
        "events_api",
        sl.message("D1", ANN, "tell me a secret", "1.000001", None),
    );
    sl.wait_shown("D1", "echo: tell me a secret").await;
    sl.drop_socket();
    sl.wait_connections(2).await;
    sl.push(
        "events_api",
        sl.message("D2", "UEVE", "let me in", "2.000001", None),
    );
    sl.wait_shown("D2", "pairing code").await;
    let mut seen = format!("{}\n{}", d.stderr_log(), d.stdout_log());
    for path in [
        "/api/v1/conversations",
        "/api/v1/pairings?all=true",
        "/api/openapi.json",
    ] {
        seen.push_str(&d.get_ok(path).await.to_string());
    }
    assert!(seen.contains("slack"), "the logs were captured");
    for secret in [
        fake_slack::BOT_TOKEN,
        fake_slack::APP_TOKEN,
        SIGNING_SECRET,
        "ticket=fake",
    ] {
        assert!(!seen.contains(secret), "{secret} leaked");
    }
}
