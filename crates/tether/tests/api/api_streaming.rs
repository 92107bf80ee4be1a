//! End to end with the fake agent: streamed deltas are stored in coalesced writes and
//! still arrive complete and in order, over SSE and in the store; an approval is stored
//! only after every event the agent sent before it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions, SseStream, within};

/// SSE events of the conversation until one satisfies `last` (included).
async fn collect_until(s: &mut SseStream, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    within("SSE events", async {
        let mut out = Vec::new();
        while let Some(ev) = s.next().await {
            let v = ev.json();
            assert_eq!(ev.event.as_deref(), v["payload"]["type"].as_str());
            assert_eq!(ev.id.as_deref(), Some(v["id"].to_string().as_str()));
            let done = last(&v);
            out.push(v);
            if done {
                return out;
            }
        }
        panic!("the event stream ended early");
    })
    .await
}

/// All stored events of a session, oldest first.
async fn stored_events(d: &Daemon, sid: &str) -> Vec<Value> {
    let page = d
        .get_ok(&format!("/api/v1/sessions/{sid}/events?limit=1000"))
        .await;
    page["events"].as_array().unwrap().clone()
}

/// Seq runs 1, 2, 3, ... without a gap.
fn assert_gap_free(events: &[Value]) {
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, expected, "seq has a gap or is out of order");
}

/// One short label per event: `d:<text>` for a message delta, `tc:<title>` for a tool
/// call, `tu:<status>` for its update, else the event type.
fn label(e: &Value) -> String {
    let p = &e["payload"];
    match p["type"].as_str().unwrap() {
        "message_delta" => format!("d:{}", p["text"].as_str().unwrap()),
        "tool_call" => format!("tc:{}", p["title"].as_str().unwrap()),
        "tool_call_update" => format!("tu:{}", p["status"].as_str().unwrap_or("")),
        other => other.to_string(),
    }
}

fn delta_text(events: &[Value], turn_id: &str) -> String {
    events
        .iter()
        .filter(|e| e["turn_id"] == turn_id && e["payload"]["type"] == "message_delta")
        .map(|e| e["payload"]["text"].as_str().unwrap())
        .collect()
}

async fn figures(d: &Daemon) -> (u64, u64) {
    let f = d.get_ok("/api/v1/runtime").await;
    (
        f["streamed_events"].as_u64().unwrap(),
        f["streamed_batches"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn a_fast_stream_is_stored_in_few_batches_complete_and_in_order() {
    const N: usize = 500;
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let mut sse = d.events(&c, Some("0")).await;
    let (events0, batches0) = figures(&d).await;

    let o = d.say(&c, &format!("stream {N} 0")).await;
    let sid = o["session_id"].as_str().unwrap().to_string();
    let tid = o["turn_id"].as_str().unwrap().to_string();
    let live = collect_until(&mut sse, |v| {
        v["turn_id"] == tid.as_str() && v["payload"]["type"] == "turn_completed"
    })
    .await;
    let t = d.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "completed", "{t}");

    // Every chunk, in order, then the closing line; their text is the turn's text.
    let deltas: Vec<String> = live
        .iter()
        .filter(|e| e["payload"]["type"] == "message_delta")
        .map(label)
        .collect();
    let mut expected: Vec<String> = (1..=N).map(|i| format!("d:chunk {i} ")).collect();
    expected.push("d:\nremembers 0: []".to_string());
    assert_eq!(deltas, expected);
    let text = delta_text(&live, &tid);
    assert_eq!(t["result_text"].as_str().unwrap(), text);
    let end = live.last().unwrap();
    assert_eq!(end["payload"]["text"].as_str().unwrap(), text);

    // SSE saw exactly what the store holds, seq gap-free.
    let stored = stored_events(&d, &sid).await;
    assert_gap_free(&stored);
    let live_of_session: Vec<&Value> = live.iter().filter(|e| e["session_id"] == sid).collect();
    assert_eq!(live_of_session.len(), stored.len());
    for (a, b) in live_of_session.iter().zip(&stored) {
        assert_eq!(*a, b);
    }

    // Coalesced: the stream took far fewer store transactions than it has events, and
    // no transaction held more than 64 of them. (On a loaded 2-core debug build, batching
    // only what was already received took 366-382 transactions for these 501 events; a
    // 3 ms window took 136.)
    let (events1, batches1) = figures(&d).await;
    let events = (events1 - events0) as usize;
    let batches = (batches1 - batches0) as usize;
    assert_eq!(events, N + 1, "streamed events stored");
    assert!(
        batches * 2 <= events,
        "{events} streamed events took {batches} store transactions"
    );
    assert!(batches >= events.div_ceil(64), "{batches} batches");
}

/// Several conversations streaming at once: their batches share group commits, and each
/// conversation still gets all of its own events, complete and in order, and nothing else.
#[tokio::test]
async fn concurrent_streams_share_commits_and_stay_complete_and_apart() {
    const STREAMS: usize = 6;
    const N: usize = 300;
    let d = Daemon::start(DaemonOptions::default()).await;
    let mut convs = Vec::new();
    for _ in 0..STREAMS {
        let c = d.new_conversation(None).await;
        let sse = d.events(&c, Some("0")).await;
        convs.push((c, sse));
    }
    let before = d.get_ok("/api/v1/runtime").await;
    // The turns start together and stream at 2 000 deltas/s (about 150 ms each), so the
    // streams overlap whatever the machine's load: one after another at full speed, each
    // could end before the next began and no commit would be shared (seen on PostgreSQL).
    let prompt = format!("rate {N} 2000");
    let says = convs.iter().map(|(c, _)| d.say(c, &prompt));
    let turns: Vec<(String, String)> = futures::future::join_all(says)
        .await
        .iter()
        .map(|o| {
            (
                o["session_id"].as_str().unwrap().to_string(),
                o["turn_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for ((c, sse), (sid, tid)) in convs.iter_mut().zip(&turns) {
        let live = collect_until(sse, |v| {
            v["turn_id"] == tid.as_str() && v["payload"]["type"] == "turn_completed"
        })
        .await;
        assert!(live.iter().all(|e| e["conversation_id"] == c.as_str()));
        let deltas: Vec<String> = live
            .iter()
            .filter(|e| e["payload"]["type"] == "message_delta")
            .map(label)
            .collect();
        let mut expected: Vec<String> = (1..=N).map(|i| format!("d:chunk {i} ")).collect();
        expected.push("d:\nremembers 0: []".to_string());
        assert_eq!(deltas, expected, "conversation {c}");
        let stored = stored_events(&d, sid).await;
        assert_gap_free(&stored);
        assert_eq!(live.len(), stored.len());
    }
    let after = d.get_ok("/api/v1/runtime").await;
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    let batches = n(&after, "streamed_batches") - n(&before, "streamed_batches");
    let commits = n(&after, "event_commits") - n(&before, "event_commits");
    assert!(
        commits < batches,
        "{STREAMS} concurrent streams: {batches} batches in {commits} commits"
    );
}

#[tokio::test]
async fn deltas_between_tool_calls_are_stored_in_order_before_the_approval_that_ends_them() {
    const N: usize = 300;
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let mut sse = d.events(&c, Some("0")).await;

    let o = d.say(&c, &format!("streamtools {N} rm -rf build")).await;
    let sid = o["session_id"].as_str().unwrap().to_string();
    let tid = o["turn_id"].as_str().unwrap().to_string();
    let before = collect_until(&mut sse, |v| v["payload"]["type"] == "approval_requested").await;

    // Everything the agent sent before asking was published, in its order, before the
    // approval was.
    let turn: Vec<String> = before
        .iter()
        .filter(|e| e["turn_id"] == tid.as_str())
        .map(label)
        .filter(|l| l != "turn_started")
        .collect();
    let mut expected = Vec::new();
    for i in 1..=N {
        expected.push(format!("d:chunk {i} "));
        if i % (N / 3) == 0 && i < N {
            expected.push(format!("tc:step {i}"));
            expected.push("tu:completed".to_string());
        }
    }
    expected.push("tc:rm -rf build".to_string());
    expected.push("approval_requested".to_string());
    assert_eq!(turn, expected);
    // The approval is in the store when it is announced, after all those events.
    let stored = stored_events(&d, &sid).await;
    assert_gap_free(&stored);
    assert_eq!(label(stored.last().unwrap()), "approval_requested");
    let approval = before.last().unwrap()["payload"]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let pending = d.get_ok("/api/v1/approvals?status=pending").await;
    assert!(
        pending
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == approval.as_str()),
        "{pending}"
    );

    d.post_ok(
        &format!("/api/v1/approvals/{approval}"),
        json!({"decision": "allow"}),
    )
    .await;
    let after = collect_until(&mut sse, |v| {
        v["turn_id"] == tid.as_str() && v["payload"]["type"] == "turn_completed"
    })
    .await;
    let t = d.wait_turn(&sid, &tid).await;
    assert_eq!(t["status"], "completed", "{t}");
    let all: Vec<Value> = before.into_iter().chain(after).collect();
    let text = delta_text(&all, &tid);
    assert!(
        text.ends_with("approval: allowed\nremembers 0: []"),
        "{text}"
    );
    assert_eq!(t["result_text"].as_str().unwrap(), text);

    // SSE and the store agree on the whole session, seq gap-free.
    let stored = stored_events(&d, &sid).await;
    assert_gap_free(&stored);
    let live: Vec<&Value> = all.iter().filter(|e| e["session_id"] == sid).collect();
    assert_eq!(live.len(), stored.len());
    for (a, b) in live.iter().zip(&stored) {
        assert_eq!(*a, b);
    }
}
