//! End to end: the HTTP server's defences against slow and sloppy clients and foreign
//! pages. Slow clients (half headers, held-back bodies, idle connections) are closed
//! within the configured time-outs while others are served; webhooks check their secret
//! before reading a body; foreign `Host` headers are refused (webhooks exempt); request
//! bodies refuse unknown fields, non-objects and overlong fields; a wrong method is
//! `method_not_allowed` with `Allow`; the OpenAPI document lists every route.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::fake_telegram::{FakeTelegram, private_chat};
use tether_testkit::{Daemon, DaemonOptions, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ANN: (i64, &str) = (111, "Ann");
const SECRET: &str = "hook-s3cret";

/// A daemon with 1 s header and body time-outs and the Telegram webhook on.
async fn start(server_extra: &str) -> (FakeTelegram, Daemon) {
    let tg = FakeTelegram::start().await;
    let telegram = tg.config(
        &[ANN.0],
        &format!(
            "mode = \"webhook\"\nwebhook_secret = \"{SECRET}\"\n\
             webhook_url = \"https://bot.example.org/hooks/telegram\"\n"
        ),
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: format!(
            "[server]\nheader_read_timeout_secs = 1\nbody_read_timeout_secs = 1\n{server_extra}\n\n{telegram}"
        ),
        capture_stderr: true,
        ..Default::default()
    })
    .await;
    (tg, d)
}

fn addr(d: &Daemon) -> String {
    d.base.trim_start_matches("http://").to_string()
}

/// Reads until the server closes the connection; `None` if it is still open after
/// `limit`. Returns what the server wrote.
async fn closed_within(sock: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut raw = Vec::new();
    match tokio::time::timeout(limit, sock.read_to_end(&mut raw)).await {
        Ok(_) => Some(String::from_utf8_lossy(&raw).into_owned()),
        Err(_) => None,
    }
}

/// One raw request with `Connection: close`; the whole answer as text.
async fn raw(d: &Daemon, request: String) -> String {
    let mut sock = TcpStream::connect(addr(d)).await.unwrap();
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    within("raw answer", sock.read_to_end(&mut out))
        .await
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn body_of(answer: &str) -> Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or(Value::Null)
}

#[tokio::test]
async fn slow_clients_are_closed_within_the_time_outs_while_others_are_served() {
    let (_tg, d) = start("").await;
    let a = addr(&d);
    // Generous: the limit is 1 s, the machine is shared.
    let limit = Duration::from_secs(10);

    // Half the headers, then nothing.
    let mut half = TcpStream::connect(&a).await.unwrap();
    half.write_all(format!("GET /api/v1/health HTTP/1.1\r\nHost: {a}\r\nX-Partial: ").as_bytes())
        .await
        .unwrap();
    // Connected, silent.
    let mut silent = TcpStream::connect(&a).await.unwrap();
    // Held-back bodies to the webhook without the secret: refused from the headers.
    let mut anonymous = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(&a).await.unwrap();
        s.write_all(
            format!(
                "POST /hooks/telegram HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\n\
                 Content-Length: 100000\r\n\r\n{{\"update_id\": 1, \"message\": "
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        anonymous.push(s);
    }
    // Held-back bodies with the right secret and on the API with the token.
    let mut hooked = TcpStream::connect(&a).await.unwrap();
    hooked
        .write_all(
            format!(
                "POST /hooks/telegram HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\n\
                 X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\nContent-Length: 1000\r\n\r\n{{\"update_id\": "
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut api = TcpStream::connect(&a).await.unwrap();
    api.write_all(
        format!(
            "POST /api/v1/conversations HTTP/1.1\r\nHost: {a}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"title\": \"",
            d.token
        )
        .as_bytes(),
    )
    .await
    .unwrap();

    // Meanwhile the daemon serves others.
    let started = Instant::now();
    let (status, body) = d.get("/api/v1/health").await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));

    for (i, s) in anonymous.iter_mut().enumerate() {
        let answer = closed_within(s, limit)
            .await
            .unwrap_or_else(|| panic!("anonymous upload {i} still open"));
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    assert!(
        closed_within(&mut half, limit).await.is_some(),
        "half headers: still open"
    );
    assert!(
        closed_within(&mut silent, limit).await.is_some(),
        "silent connection: still open"
    );
    let answer = closed_within(&mut hooked, limit)
        .await
        .expect("held-back webhook body: still open");
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = closed_within(&mut api, limit)
        .await
        .expect("held-back API body: still open");
    assert!(!answer.starts_with("HTTP/1.1 2"), "{answer}");
    assert!(
        d.get_ok("/api/v1/conversations")
            .await
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A slow but steady body (pauses under the limit) still goes through.
    let mut steady = TcpStream::connect(&a).await.unwrap();
    let body = br#"{"title": "steady"}"#;
    steady
        .write_all(
            format!(
                "POST /api/v1/conversations HTTP/1.1\r\nHost: {a}\r\nAuthorization: Bearer {}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                d.token,
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    for chunk in body.chunks(8) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        steady.write_all(chunk).await.unwrap();
    }
    let answer = closed_within(&mut steady, limit).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    // The webhook's own body limit is far below the API's: answered from the headers
    // (only the start of the body is sent, as a client would see a reset otherwise).
    let mut big = TcpStream::connect(&a).await.unwrap();
    big.write_all(
        format!(
            "POST /hooks/telegram HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{{\"update_id\": 1, \"pad\": \"xxxx",
            300 * 1024
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = closed_within(&mut big, limit).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[tokio::test]
async fn event_streams_outlive_the_read_time_outs() {
    let (_tg, d) = start("").await;
    let c = d.new_conversation(None).await;
    let mut events = d.events(&c, None).await;
    // Longer than both time-outs, with nothing to say.
    tokio::time::sleep(Duration::from_secs(3)).await;
    d.say(&c, "hello").await;
    let mut seen = Vec::new();
    within("events after a quiet while", async {
        while let Some(ev) = events.next().await {
            let kind = ev.json()["payload"]["type"]
                .as_str()
                .unwrap_or("")
                .to_string();
            seen.push(kind.clone());
            if kind == "turn_completed" {
                return;
            }
        }
        panic!("the stream ended: {seen:?}");
    })
    .await;
    assert!(seen.iter().any(|k| k == "turn_started"), "{seen:?}");
}

#[tokio::test]
async fn foreign_host_headers_are_refused_except_on_webhooks() {
    let (tg, d) = start("allowed_hosts = [\"tether.example.org\"]").await;
    let get = |host: &str, path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            d.token
        )
    };
    for path in ["/api/v1/conversations", "/", "/api/v1/health", "/mcp"] {
        let answer = raw(&d, get("evil.example", path)).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer}");
        assert_eq!(
            body_of(&answer)["error"]["code"],
            "host_not_allowed",
            "{answer}"
        );
    }
    let port = addr(&d).rsplit(':').next().unwrap().to_string();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "tether.example.org".to_string(),
    ] {
        let answer = raw(&d, get(&host, "/api/v1/conversations")).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    // `/mcp` admits the same hosts as the rest of the API (a proxy's name included).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}})
    .to_string();
    for host in [
        format!("127.0.0.1:{port}"),
        "tether.example.org".to_string(),
    ] {
        let answer = raw(
            &d,
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\
                 Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{init}",
                d.token,
                init.len()
            ),
        )
        .await;
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "/mcp via {host}: {answer}"
        );
    }
    // Webhooks come through proxies under public names.
    let update = tg
        .text_update(&private_chat(ANN.0), ANN, "via proxy")
        .to_string();
    let answer = raw(
        &d,
        format!(
            "POST /hooks/telegram HTTP/1.1\r\nHost: bot.example.org\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{update}",
            update.len()
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Refusals anyone can send are logged at most once a minute (issue 24 S10): 30 more
    // foreign Hosts and 30 webhooks with a wrong secret add one WARN each at most.
    for _ in 0..30 {
        raw(&d, get("evil.example", "/api/v1/health")).await;
        let answer = raw(
            &d,
            "POST /hooks/telegram HTTP/1.1\r\nHost: bot.example.org\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: wrong\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
                .to_string(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    let count = |what: &str| {
        let log = d.stderr_log();
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(what))
            .count()
    };
    // (The daemon's log reaches its file a moment later.)
    within("the refusals are logged", async {
        while count("webhook request refused") == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count("foreign Host refused"), 1, "{}", d.stderr_log());
    assert_eq!(count("webhook request refused"), 1, "{}", d.stderr_log());
}

#[tokio::test]
async fn request_bodies_refuse_unknown_fields_non_objects_and_overlong_fields() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let (status, body) = d
        .post("/api/v1/conversations", json!({"agnet": "claude"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_json");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("agnet"),
        "{body}"
    );
    for bad in [json!([]), json!(["x"]), json!("x"), json!(5)] {
        let (status, body) = d.post("/api/v1/conversations", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_json", "{bad}");
    }
    let (status, body) = d
        .post(
            "/api/v1/conversations",
            json!({"title": "x".repeat(900_000)}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("title"),
        "{body}"
    );
    assert!(
        d.get_ok("/api/v1/conversations")
            .await
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing was created"
    );

    let c = d.new_conversation(None).await;
    let (status, body) = d
        .patch(
            &format!("/api/v1/conversations/{c}"),
            json!({"title": "y".repeat(201)}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let (status, body) = d
        .patch(
            &format!("/api/v1/conversations/{c}"),
            json!({"titel": "renamed"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_json")),
        "{body}"
    );
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{c}/messages"),
            json!({"text": "hi", "modle": "x"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("modle"),
        "{body}"
    );
    let conv = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
    assert_eq!(conv["state"], "unbound", "no turn ran");
    assert_ne!(conv["title"], "renamed");
}

#[tokio::test]
async fn wrong_methods_are_method_not_allowed_with_allow() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let resp = within(
        "DELETE",
        d.client
            .delete(d.url("/api/v1/conversations"))
            .bearer_auth(&d.token)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let allow = resp.headers()["allow"].to_str().unwrap().to_string();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
}

#[tokio::test]
async fn openapi_lists_pairings_webhooks_mcp_and_the_page() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let doc: Value = within("openapi", d.client.get(d.url("/api/openapi.json")).send())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (path, method) in [
        ("/api/v1/pairings", "get"),
        ("/api/v1/pairings/{code}/approve", "post"),
        ("/hooks/telegram", "post"),
        ("/hooks/feishu", "post"),
        ("/hooks/slack", "post"),
        ("/hooks/discord", "post"),
        ("/mcp", "post"),
        ("/mcp", "get"),
        ("/", "get"),
        ("/assets/{file}", "get"),
        ("/api/v1/conversations", "post"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "OpenAPI lacks {method} {path}"
        );
    }
    assert!(doc["components"]["schemas"]["Pairing"].is_object());
    let codes = doc["components"]["schemas"]["ErrorCode"].to_string();
    assert!(codes.contains("method_not_allowed"), "{codes}");
    assert!(codes.contains("host_not_allowed"), "{codes}");
}

/// A webhook request whose body drips in a byte at a time, each within the body
/// time-out, with the right secret (so the body is read).
async fn dripping_hook(d: &Daemon) -> TcpStream {
    let a = addr(d);
    let mut s = TcpStream::connect(&a).await.unwrap();
    s.write_all(
        format!(
            "POST /hooks/telegram HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\nContent-Length: 100000\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    s
}

/// Issue 24 S2: a body dripped slower than nothing but faster than the body time-out is
/// cut by the webhook's overall deadline.
#[tokio::test]
async fn a_dripping_webhook_body_is_cut_by_the_overall_deadline() {
    let (_tg, d) = start("unauthenticated_deadline_secs = 2").await;
    let mut s = dripping_hook(&d).await;
    let start = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // Drip a byte every 400 ms (within the 1 s body time-out) for up to 15 s.
    let closed = loop {
        if start.elapsed() > Duration::from_secs(15) {
            break false;
        }
        if s.write_all(b" ").await.is_err() {
            break true;
        }
        match tokio::time::timeout(Duration::from_millis(400), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    };
    assert!(closed, "still open after 15 s of dripping");
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(12),
        "{:?}",
        start.elapsed()
    );
}

/// Issue 24 S2: past the connection cap minus the reserve, webhooks answer 503
/// `server_busy` at once while authenticated requests are still served. (The Telegram
/// webhook also caps the bodies it reads at once, so the connections are held here by
/// event streams.)
#[tokio::test]
async fn unauthenticated_clients_leave_room_for_authenticated_ones() {
    let (_tg, d) = start("max_connections = 30\nreserved_connections = 10").await;
    let c = d.new_conversation(None).await;
    let mut held = Vec::new();
    for _ in 0..22 {
        held.push(d.events(&c, None).await);
    }
    let a = addr(&d);
    let busy = raw(
        &d,
        format!(
            "POST /hooks/telegram HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\n\
             X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    )
    .await;
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    assert_eq!(body_of(&busy)["error"]["code"], "server_busy", "{busy}");
    let (status, body) = d.get("/api/v1/conversations").await;
    assert_eq!(status, 200, "{body}");
    // Room again once they end.
    drop(held);
    within("webhooks are served again", async {
        loop {
            let answer = raw(
                &d,
                format!(
                    "POST /hooks/telegram HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\n\
                     X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                ),
            )
            .await;
            if answer.starts_with("HTTP/1.1 200") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
}

/// An upload whose multipart body drips in a byte at a time (authenticated, so the body
/// is read), on conversation `conv`.
async fn dripping_upload(d: &Daemon, conv: &str) -> TcpStream {
    let a = addr(d);
    let mut s = TcpStream::connect(&a).await.unwrap();
    s.write_all(
        format!(
            "POST /api/v1/conversations/{conv}/attachments HTTP/1.1\r\nHost: {a}\r\n\
             Authorization: Bearer {}\r\nContent-Type: multipart/form-data; boundary=XX\r\n\
             Content-Length: 100000\r\n\r\n--XX\r\nContent-Disposition: form-data; \
             name=\"f\"; filename=\"a.txt\"\r\n\r\n",
            d.token
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    s
}

/// Drips a byte every 400 ms until the server closes; what it answered and when.
async fn drip_until_closed(s: &mut TcpStream, limit: Duration) -> Option<(String, Duration)> {
    let start = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if start.elapsed() > limit {
            return None;
        }
        if s.write_all(b"x").await.is_err() {
            break;
        }
        match tokio::time::timeout(Duration::from_millis(400), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    Some((
        String::from_utf8_lossy(&answer).into_owned(),
        start.elapsed(),
    ))
}

/// Issue 24 S8: an upload has an overall deadline (a body dripped within the body
/// time-out is cut), uploads at once are capped (503 `server_busy`, others still
/// served), and the parts of one upload are capped (413 before the rest is read, nothing
/// stored).
#[tokio::test]
async fn uploads_are_cut_at_their_deadline_capped_at_once_and_in_parts() {
    let (_tg, d) =
        start("upload_deadline_secs = 3\nmax_uploads = 1\n\n[attachments]\nmax_files = 3").await;
    let conv = d.new_conversation(None).await;
    let mut slow = dripping_upload(&d, &conv).await;
    // The one upload slot is taken: another upload is refused at once ...
    tokio::time::sleep(Duration::from_millis(300)).await;
    let part = |name: &'static str| tether_testkit::uploads::Part {
        name,
        content_type: None,
        bytes: b"hello\n",
    };
    let (status, body) = d.upload(&conv, &[part("b.txt")]).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("server_busy")),
        "{body}"
    );
    // ... while the rest of the API is served.
    let (status, _) = d.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(status, 200);
    let (answer, took) = drip_until_closed(&mut slow, Duration::from_secs(15))
        .await
        .expect("the dripping upload is still open after 15 s");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");

    // The slot is free again; more parts than max_files are refused, nothing is stored.
    let blobs = d.data_dir().join("attachments");
    let count = || std::fs::read_dir(&blobs).map_or(0, |r| r.count());
    let before = count();
    let (status, body) = d
        .upload(
            &conv,
            &[part("1.txt"), part("2.txt"), part("3.txt"), part("4.txt")],
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("attachment_too_large")),
        "{body}"
    );
    assert_eq!(count(), before, "nothing stored");
    let (status, body) = d
        .upload(&conv, &[part("1.txt"), part("2.txt"), part("3.txt")])
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["attachments"].as_array().unwrap().len(), 3);
    // A message names at most max_files attachments too.
    let ids: Vec<Value> = (0..4).map(|i| json!(format!("att_{i}"))).collect();
    let (status, body) = d
        .post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({ "text": "x", "attachments": ids }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("attachment_too_large")),
        "{body}"
    );
}

/// Issue 24, first use 9: routes that take no body refuse one instead of ignoring it,
/// and `/mcp`'s 406 and 415 carry their own codes.
#[tokio::test]
async fn bodiless_routes_refuse_a_body_and_mcp_names_406_and_415() {
    let d = Daemon::start(DaemonOptions::default()).await;
    let c = d.new_conversation(None).await;
    for route in ["new-session", "detach", "stop"] {
        let path = format!("/api/v1/conversations/{c}/{route}");
        let (status, body) = d.post(&path, json!({"text": "do this"})).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{route}: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("takes no body"),
            "{body}"
        );
        let (status, body) = d.post(&path, json!({})).await;
        assert_ne!(status, 400, "{route}: {{}} is no body: {body}");
        let r = d
            .client
            .post(d.url(&path))
            .bearer_auth(&d.token)
            .send()
            .await
            .unwrap();
        assert_ne!(r.status().as_u16(), 400, "{route}: an empty body is fine");
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    let answer = |accept: &'static str, ct: &'static str| {
        let req = d
            .client
            .post(d.url("/mcp"))
            .bearer_auth(&d.token)
            .header("accept", accept)
            .header("content-type", ct)
            .body(init.to_string());
        async move {
            let r = within("/mcp", req.send()).await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            (status, body["error"]["code"].as_str().map(str::to_owned))
        }
    };
    assert_eq!(
        answer("text/html", "application/json").await,
        (406, Some("not_acceptable".to_owned()))
    );
    assert_eq!(
        answer("application/json, text/event-stream", "text/plain").await,
        (415, Some("unsupported_media_type".to_owned()))
    );
}
