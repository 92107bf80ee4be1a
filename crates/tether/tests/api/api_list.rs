//! What long lists need from the API, through a real `tether serve`: the conversation
//! list, a session's turns, approvals and questions in pages with a cursor, the list event stream (created,
//! renamed, running, idle, archived) and a conversation's events and history read
//! backwards from the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use serde_json::{Value, json};
use tether_testkit::SseStream;
use tether_testkit::{Daemon, DaemonOptions, within};

/// GET with the token; returns the status, the `X-Next-Cursor` header and the body.
async fn get_page(d: &Daemon, path: &str) -> (u16, Option<String>, Value) {
    let resp = within(
        "GET",
        d.client.get(d.url(path)).bearer_auth(&d.token).send(),
    )
    .await
    .unwrap();
    let status = resp.status().as_u16();
    let cursor = resp
        .headers()
        .get("x-next-cursor")
        .map(|v| v.to_str().unwrap().to_string());
    let body = within("body", resp.json::<Value>()).await.unwrap();
    (status, cursor, body)
}

#[tokio::test]
async fn the_conversation_list_comes_in_pages_with_a_cursor() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let mut made = Vec::new();
    for i in 0..7 {
        let c = d
            .post_ok("/api/v1/conversations", json!({"title": format!("c{i}")}))
            .await;
        made.push(c["id"].as_str().unwrap().to_string());
    }
    // Archived ones are left out unless asked for.
    d.patch(
        &format!("/api/v1/conversations/{}", made[0]),
        json!({"archived": true}),
    )
    .await;

    let mut seen = Vec::new();
    let mut path = "/api/v1/conversations?limit=3".to_string();
    let mut pages = 0;
    loop {
        let (status, next, body) = get_page(&d, &path).await;
        assert_eq!(status, 200, "{body}");
        let page = body.as_array().unwrap();
        assert!(page.len() <= 3);
        seen.extend(page.iter().cloned());
        pages += 1;
        match next {
            Some(c) => path = format!("/api/v1/conversations?limit=3&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(pages, 2, "6 conversations in pages of 3");
    let ids: Vec<&str> = seen.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 6);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 6, "no duplicates");
    assert!(!ids.contains(&made[0].as_str()), "archived left out");
    let times: Vec<i64> = seen
        .iter()
        .map(|c| c["updated_at_ms"].as_i64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first");

    // With archived ones; the default page holds them all and has no next cursor.
    let (_, next, all) = get_page(&d, "/api/v1/conversations?include_archived=true").await;
    assert_eq!(all.as_array().unwrap().len(), 7);
    assert_eq!(next, None);

    let (status, _, body) = get_page(&d, "/api/v1/conversations?cursor=nonsense").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "bad_request");

    let doc = d.get_ok("/api/openapi.json").await;
    let params = doc["paths"]["/api/v1/conversations"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"limit") && names.contains(&"cursor"),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_sessions_turns_come_in_pages_with_a_cursor() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let conv = d.new_conversation(None).await;
    let mut made = Vec::new();
    let mut session = String::new();
    for i in 0..5 {
        let (out, turn) = d.say_and_wait(&conv, &format!("m{i}")).await;
        assert_eq!(turn["status"], "completed", "{turn}");
        session = out["session_id"].as_str().unwrap().to_string();
        made.push(out["turn_id"].as_str().unwrap().to_string());
    }
    let base = format!("/api/v1/sessions/{session}/turns");
    let mut seen = Vec::new();
    let mut path = format!("{base}?limit=2");
    let mut sizes = Vec::new();
    loop {
        let (status, next, body) = get_page(&d, &path).await;
        assert_eq!(status, 200, "{body}");
        let page = body.as_array().unwrap();
        sizes.push(page.len());
        seen.extend(page.iter().map(|t| t["id"].as_str().unwrap().to_string()));
        match next {
            Some(c) => path = format!("{base}?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(sizes, [2, 2, 1], "5 turns in pages of 2");
    assert_eq!(seen, made, "each turn once, oldest first");

    // The default page holds them all, without a cursor; so does the testkit's reader.
    let (_, next, all) = get_page(&d, &base).await;
    assert_eq!(all.as_array().unwrap().len(), 5);
    assert_eq!(next, None);
    assert_eq!(d.all_turns(&session).await, all);

    for bad in ["cursor=nonsense", "cursor=12.x", "limit=0"] {
        let (status, _, body) = get_page(&d, &format!("{base}?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "bad_request");
    }
    let (status, _, _) = get_page(&d, "/api/v1/sessions/nope/turns?limit=2").await;
    assert_eq!(status, 404);
}

/// Every page of `base` (a list of approvals or questions) in pages of `limit`: the
/// ids in order and each page's size.
async fn all_pages(d: &Daemon, base: &str, limit: usize) -> (Vec<Value>, Vec<usize>) {
    let (mut seen, mut sizes) = (Vec::new(), Vec::new());
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut path = format!("{base}{sep}limit={limit}");
    loop {
        let (status, next, body) = get_page(d, &path).await;
        assert_eq!(status, 200, "{body}");
        let page = body.as_array().unwrap();
        sizes.push(page.len());
        seen.extend(page.iter().cloned());
        match next {
            Some(c) => path = format!("{base}{sep}limit={limit}&cursor={c}"),
            None => return (seen, sizes),
        }
    }
}

/// Approvals and questions come in pages, newest first: each request once, however
/// many there are (the lists used to stop at the newest 500).
#[tokio::test]
async fn approvals_and_questions_come_in_pages_with_a_cursor() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let mut convs = Vec::new();
    for i in 0..5 {
        let c = d.new_conversation(None).await;
        let ask = if i % 2 == 0 { "approve" } else { "ask" };
        d.say(&c, &format!("{ask} step {i}?")).await;
        convs.push(c);
    }
    // Three approvals and two questions, all pending.
    within("every request is pending", async {
        loop {
            let a = d.get_ok("/api/v1/approvals?status=pending").await;
            let q = d.get_ok("/api/v1/questions?status=pending").await;
            if a.as_array().unwrap().len() == 3 && q.as_array().unwrap().len() == 2 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    for (base, n) in [
        ("/api/v1/approvals", 3),
        ("/api/v1/approvals?status=pending", 3),
        ("/api/v1/questions", 2),
    ] {
        let (seen, sizes) = all_pages(&d, base, 2).await;
        let want: Vec<usize> = if n == 3 { vec![2, 1] } else { vec![2] };
        assert_eq!(sizes, want, "{base}");
        let ids: HashSet<&str> = seen.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), n, "{base}: each once");
        let at: Vec<i64> = seen
            .iter()
            .map(|r| r["created_at_ms"].as_i64().unwrap())
            .collect();
        assert!(
            at.windows(2).all(|w| w[0] >= w[1]),
            "{base}: newest first {at:?}"
        );
        // Pages of one give the same requests in the same order.
        let (one_by_one, _) = all_pages(&d, base, 1).await;
        assert_eq!(one_by_one, seen, "{base}");
    }
    let (_, sizes) = all_pages(&d, "/api/v1/approvals?status=allowed", 2).await;
    assert_eq!(sizes, [0], "none allowed yet");
    for bad in ["cursor=nonsense", "cursor=12.", "cursor=x.y", "limit=0"] {
        for list in ["approvals", "questions"] {
            let (status, _, body) = get_page(&d, &format!("/api/v1/{list}?{bad}")).await;
            assert_eq!(status, 400, "{list} {bad}: {body}");
            assert_eq!(body["error"]["code"], "bad_request");
        }
    }
}

/// The next `conversation` message about `id` that satisfies `pred`.
async fn next_change(s: &mut SseStream, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    within("a list change", async {
        loop {
            let ev = s.next().await.expect("the list stream ended");
            if ev.event.as_deref() != Some("conversation") {
                continue;
            }
            let msg = ev.json();
            if msg["conversation"]["id"] == id && pred(&msg) {
                return msg;
            }
        }
    })
    .await
}

#[tokio::test]
async fn the_list_event_stream_tells_about_new_renamed_running_and_archived_conversations() {
    let d = Daemon::start(DaemonOptions::default()).await;
    // EventSource cannot set headers: the token also works as `?token=`.
    let resp = within(
        "open the list stream",
        d.client
            .get(d.url(&format!("/api/v1/conversations/events?token={}", d.token)))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut s = SseStream::new(resp);
    let refused = within(
        "without a token",
        d.client.get(d.url("/api/v1/conversations/events")).send(),
    )
    .await
    .unwrap();
    assert_eq!(refused.status().as_u16(), 401);

    let conv = d.new_conversation(None).await;
    let m = next_change(&mut s, &conv, |_| true).await;
    assert_eq!(m["change"], "created");
    assert_eq!(m["conversation"]["state"], "unbound");

    d.patch(
        &format!("/api/v1/conversations/{conv}"),
        json!({"title": "Renamed"}),
    )
    .await;
    let m = next_change(&mut s, &conv, |m| m["conversation"]["title"] == "Renamed").await;
    assert_eq!(m["change"], "updated");

    d.say(&conv, "sleep 800").await;
    next_change(&mut s, &conv, |m| {
        m["conversation"]["state"] == "bound/running"
    })
    .await;
    next_change(&mut s, &conv, |m| {
        m["conversation"]["state"] == "bound/idle"
    })
    .await;

    d.patch(
        &format!("/api/v1/conversations/{conv}"),
        json!({"archived": true}),
    )
    .await;
    let m = next_change(&mut s, &conv, |m| m["change"] == "archived").await;
    assert_eq!(m["conversation"]["archived"], true);

    let doc = d.get_ok("/api/openapi.json").await;
    assert!(doc["paths"]["/api/v1/conversations/events"]["get"].is_object());
    assert!(doc["components"]["schemas"]["ConversationChange"].is_object());
}

#[tokio::test]
async fn a_conversations_events_and_history_read_backwards_from_the_end() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let conv = d.new_conversation(None).await;
    for _ in 0..3 {
        let (_, turn) = d.say_and_wait(&conv, "stream 40 0").await;
        assert_eq!(turn["status"], "completed");
    }
    // Every event, read backwards in pages of 25: no gaps, no duplicates, oldest first.
    let mut ids: Vec<i64> = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let path = match before {
            Some(b) => format!("/api/v1/conversations/{conv}/events/page?limit=25&before_id={b}"),
            None => format!("/api/v1/conversations/{conv}/events/page?limit=25"),
        };
        let page = d.get_ok(&path).await;
        let evs = page["events"].as_array().unwrap();
        let page_ids: Vec<i64> = evs.iter().map(|e| e["id"].as_i64().unwrap()).collect();
        assert!(page_ids.windows(2).all(|w| w[0] < w[1]), "oldest first");
        if let (Some(last), Some(b)) = (page_ids.last(), before) {
            assert!(*last < b);
        }
        ids.splice(0..0, page_ids.iter().copied());
        if page["has_more"] != true {
            break;
        }
        assert_eq!(evs.len(), 25);
        before = page_ids.first().copied();
    }
    assert!(ids.len() > 120, "3 turns of 40 chunks: {}", ids.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "no duplicates");
    // The same events the stream replays from the start.
    let mut s = d.events(&conv, None).await;
    let mut replayed = Vec::new();
    within("replay", async {
        while replayed.len() < ids.len() {
            let ev = s.next().await.unwrap();
            replayed.push(ev.id.unwrap().parse::<i64>().unwrap());
        }
    })
    .await;
    assert_eq!(replayed, ids);

    // History backwards: the last 2 messages, then the 2 before them.
    let all = d
        .get_ok(&format!("/api/v1/conversations/{conv}/messages"))
        .await;
    let all: Vec<i64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(all.len(), 6, "3 prompts and 3 replies");
    let last = d
        .get_ok(&format!(
            "/api/v1/conversations/{conv}/messages?before_id={}&limit=2",
            i64::MAX
        ))
        .await;
    let last: Vec<i64> = last
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(last, all[4..].to_vec());
    let prev = d
        .get_ok(&format!(
            "/api/v1/conversations/{conv}/messages?before_id={}&limit=2",
            last[0]
        ))
        .await;
    assert_eq!(prev[0]["id"].as_i64().unwrap(), all[2]);
    assert_eq!(prev.as_array().unwrap().len(), 2);

    let doc = d.get_ok("/api/openapi.json").await;
    let params = doc["paths"]["/api/v1/conversations/{id}/events/page"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"before_id") && names.contains(&"limit"),
        "{names:?}"
    );
}

/// Issue 24, first use 4: an untitled conversation is named by its first message; a
/// later message or a named conversation keeps its title.
#[tokio::test]
async fn an_untitled_conversation_is_named_by_its_first_message() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    let title = |v: Value| v["title"].as_str().unwrap().to_owned();
    assert_eq!(
        title(d.get_ok(&format!("/api/v1/conversations/{c}")).await),
        "New conversation"
    );
    d.say_and_wait(&c, "fix the   login bug\nand add a test")
        .await;
    assert_eq!(
        title(d.get_ok(&format!("/api/v1/conversations/{c}")).await),
        "fix the login bug"
    );
    d.say_and_wait(&c, "something else").await;
    assert_eq!(
        title(d.get_ok(&format!("/api/v1/conversations/{c}")).await),
        "fix the login bug"
    );
    let named = d
        .post_ok("/api/v1/conversations", json!({"title": "Mine"}))
        .await;
    let n = named["id"].as_str().unwrap().to_owned();
    d.say_and_wait(&n, "hello").await;
    assert_eq!(
        title(d.get_ok(&format!("/api/v1/conversations/{n}")).await),
        "Mine"
    );
}
