//! End to end, issue 31: one trace per turn, across nodes, read by a real OTLP/HTTP
//! receiver in the test (the protocol's own protobuf types). A message sent to node b
//! for a conversation node a owns is routed (b), forwarded with its `traceparent` in
//! the command row, run by a's actor, prompts the agent, whose delegation (from the MCP
//! server) starts a child that runs on b (a is at `max_live_per_node`): one trace from
//! b's HTTP request to the child's prompt on b, parent by parent. An approval's wait is
//! a span of its turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use serde_json::json;
use tether_testkit::{Cluster, DaemonOptions, within, within_for};

use crate::common::str_of;
use crate::delegation_util::tool_result;

/// A span as the receiver got it.
#[derive(Debug, Clone)]
struct Got {
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    attrs: HashMap<String, String>,
}

type Spans = Arc<Mutex<Vec<Got>>>;

/// An OTLP/HTTP receiver on a port of its own: every exported span, decoded.
async fn receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let keep = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).unwrap();
                let mut out = keep.lock().unwrap();
                for rs in req.resource_spans {
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            let attrs = s
                                .attributes
                                .iter()
                                .map(|kv| {
                                    let v = kv
                                        .value
                                        .as_ref()
                                        .and_then(|v| v.value.as_ref())
                                        .map(|v| format!("{v:?}"))
                                        .unwrap_or_default();
                                    (kv.key.clone(), v)
                                })
                                .collect();
                            out.push(Got {
                                trace: s.trace_id,
                                id: s.span_id,
                                parent: s.parent_span_id,
                                name: s.name,
                                attrs,
                            });
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

fn on(s: &Got, node: &str) -> bool {
    s.attrs.get("node").is_some_and(|v| v.contains(node))
}

/// Waits until `found` picks what it needs out of the spans received so far.
async fn wait_for<T>(spans: &Spans, what: &str, found: impl Fn(&[Got]) -> Option<T>) -> T {
    within_for(what, Duration::from_secs(30), async {
        loop {
            if let Some(t) = found(&spans.lock().unwrap()) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// Whether `ancestor` is `span`'s parent, its parent's parent, …
fn descends(all: &[Got], span: &Got, ancestor: &Got) -> bool {
    let mut at = span.clone();
    for _ in 0..64 {
        if at.parent == ancestor.id {
            return true;
        }
        match all.iter().find(|s| s.id == at.parent) {
            Some(p) => at = p.clone(),
            None => return false,
        }
    }
    false
}

#[tokio::test]
async fn a_delegated_turn_is_one_trace_across_two_nodes() {
    let (endpoint, spans) = receiver().await;
    let opts = DaemonOptions {
        extra_config: format!(
            "\n[telemetry]\notlp_endpoint = \"{endpoint}\"\n\n[cluster]\nlease_ttl_secs = 10\nmax_live_per_node = 1\n"
        ),
        env: vec![("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "100".to_owned())],
        ..DaemonOptions::default()
    };
    let cluster = Cluster::start(2, opts).await;
    let (a, b) = (cluster.node(0), cluster.node(1));
    let ids: Vec<String> = [a, b]
        .iter()
        .map(|d| {
            std::fs::read_to_string(d.data_dir().join("node_id"))
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect();
    let (id_a, id_b) = (ids[0].as_str(), ids[1].as_str());

    // The parent lives on a (a is then at its cap of one).
    let parent = a.new_conversation(None).await;
    a.say_and_wait(&parent, "hello").await;
    // Sent to b: routed to a, where its turn delegates; the child runs on b.
    let (out, turn) = b
        .say_and_wait(
            &parent,
            r#"mcp delegate_to_agent {"agent_type": "fake", "task": "child work"}"#,
        )
        .await;
    assert_eq!(turn["status"], "completed", "{out} {turn}");
    let task = str_of(&tool_result(&turn), "task_id");
    within("the child's turn ends", async {
        loop {
            let c = b.get_ok(&format!("/api/v1/conversations/{task}")).await;
            if c["state"] == "bound/idle" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    let chain = wait_for(&spans, "the child's prompt on b", |all| {
        let http = all.iter().find(|s| {
            s.name == "POST /api/v1/conversations/{id}/messages"
                && s.parent.is_empty()
                && all
                    .iter()
                    .any(|c| c.trace == s.trace && c.name == "delegate")
        })?;
        let in_trace = |name: &str, node: &str| {
            all.iter()
                .filter(|s| s.trace == http.trace && s.name == name && on(s, node))
                .cloned()
                .collect::<Vec<_>>()
        };
        let child_turn = in_trace("turn", id_b).into_iter().next()?;
        // The parent's turn on a is exported by a's own batch, on its own schedule: the
        // chain below is read once both nodes' spans are in (a loaded CI machine read it
        // before a's turn had come).
        let turn_a = in_trace("turn", id_a).into_iter().next()?;
        all.iter()
            .find(|s| s.name == "agent prompt" && s.parent == turn_a.id)?;
        let child_prompt = all
            .iter()
            .find(|s| {
                s.trace == http.trace && s.name == "agent prompt" && s.parent == child_turn.id
            })?
            .clone();
        Some((http.clone(), child_turn, child_prompt))
    })
    .await;
    let (http, child_turn, child_prompt) = chain;
    let all = spans.lock().unwrap().clone();
    let one = |name: &str, node: &str, parent: &Got| -> Got {
        all.iter()
            .find(|s| {
                s.trace == http.trace && s.name == name && on(s, node) && s.parent == parent.id
            })
            .unwrap_or_else(|| {
                let names: Vec<_> = all
                    .iter()
                    .filter(|s| s.trace == http.trace)
                    .map(|s| (&s.name, &s.attrs))
                    .collect();
                panic!("no {name} on {node} under {}: {names:#?}", parent.name)
            })
            .clone()
    };
    // b: the request, its call, the hop to a.
    let call_b = one("send_message", id_b, &http);
    let hop = all
        .iter()
        .find(|s| s.name == "forward" && s.parent == call_b.id)
        .expect("the hop to a")
        .clone();
    // a: the forwarded call, the turn, the agent's prompt, its delegation.
    let call_a = one("send_message", id_a, &hop);
    let turn_a = one("turn", id_a, &call_a);
    let prompt_a = all
        .iter()
        .find(|s| s.name == "agent prompt" && s.parent == turn_a.id)
        .expect("a's prompt")
        .clone();
    let delegate = one("delegate", id_a, &turn_a);
    // b again: the child's turn descends from the delegation, its prompt from the turn.
    assert!(
        descends(&all, &child_turn, &delegate),
        "child turn under the delegation"
    );
    assert!(descends(&all, &child_prompt, &http));
    assert_eq!(prompt_a.trace, http.trace);
    assert!(
        turn_a
            .attrs
            .get("outcome")
            .is_some_and(|v| v.contains("completed")),
        "{turn_a:?}"
    );

    // An approval's wait is a span of its turn.
    let o = b.say(&parent, "approve deploy").await;
    let pending = b.pending_approval(&parent).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.post_ok(
        &format!("/api/v1/approvals/{}", pending["id"].as_str().unwrap()),
        json!({"decision": "allow"}),
    )
    .await;
    b.wait_turn(&str_of(&o, "session_id"), &str_of(&o, "turn_id"))
        .await;
    let turn_id = str_of(&o, "turn_id");
    wait_for(&spans, "the approval's wait", |all| {
        let turn = all.iter().find(|s| {
            s.name == "turn" && s.attrs.get("turn_id").is_some_and(|v| v.contains(&turn_id))
        })?;
        all.iter()
            .find(|s| s.name == "approval" && s.parent == turn.id)
            .cloned()
    })
    .await;
}

/// A Telegram DM's trace: the update (`channel inbound`) → the call → the turn, and the
/// reply's delivery (`channel send`) a child of the turn, though the pump wrote its row
/// and the outbox sent it apart from the turn.
#[tokio::test]
async fn a_chat_message_and_its_reply_are_one_trace() {
    use tether_testkit::fake_telegram::{FakeTelegram, private_chat};
    let (endpoint, spans) = receiver().await;
    let tg = FakeTelegram::start().await;
    let opts = DaemonOptions {
        extra_config: format!(
            "{}\n[telemetry]\notlp_endpoint = \"{endpoint}\"\n",
            tg.config(&[111], "")
        ),
        env: vec![("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "100".to_owned())],
        ..DaemonOptions::default()
    };
    let _cluster = Cluster::start(1, opts).await;
    tg.say(&private_chat(111), (111, "Ann"), "hello over telegram");
    tg.wait_shown(111, "echo: hello over telegram").await;
    let (inbound, turn, send) = wait_for(&spans, "the reply's delivery", |all| {
        let inbound = all.iter().find(|s| s.name == "channel inbound")?;
        let turn = all
            .iter()
            .find(|s| s.name == "turn" && s.trace == inbound.trace)?;
        let send = all.iter().find(|s| {
            s.name == "channel send" && s.trace == inbound.trace && s.parent == turn.id
        })?;
        Some((inbound.clone(), turn.clone(), send.clone()))
    })
    .await;
    let all = spans.lock().unwrap().clone();
    assert!(
        descends(&all, &turn, &inbound),
        "the turn is under the update"
    );
    assert!(descends(&all, &send, &inbound), "the delivery too");
}
