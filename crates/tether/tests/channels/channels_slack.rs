//! End to end: Slack against a fake Web API and Socket Mode server on loopback (or, in
//! Events API mode, signed requests POSTed to a real `tether serve`), with the fake
//! agent (registered as `codex` too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::fake_slack::{self, BOT_USER, FakeSlack, SIGNING_SECRET, Shown};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

const ALICE: &str = "UALICE";
const BOB: &str = "UBOB";
const CAROL: &str = "UCAROL";

struct Setup {
    sl: FakeSlack,
    d: Daemon,
    _state: tempfile::TempDir,
}

async fn start(mode: &str) -> Setup {
    let sl = FakeSlack::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "[agents.codex]\ndriver = \"acp\"\ncommand = {:?}\nargs = [\"--state-dir\", {:?}]\n\n{}",
        bin_path("fake-agent").display().to_string(),
        state.path().display().to_string(),
        sl.config(mode, &[ALICE, BOB], "")
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    if mode == "socket" {
        sl.wait_connections(1).await;
    }
    Setup {
        sl,
        d,
        _state: state,
    }
}

/// A person's message over Socket Mode; a mention comes as `message` and `app_mention`,
/// as Slack sends it.
fn say(sl: &FakeSlack, channel: &str, user: &str, text: &str, ts: &str, thread: Option<&str>) {
    sl.push("events_api", sl.message(channel, user, text, ts, thread));
    if text.contains(&format!("<@{BOT_USER}>")) {
        sl.push("events_api", sl.mention(channel, user, text, ts, thread));
    }
}

async fn conversations(d: &Daemon) -> Vec<Value> {
    d.get_ok("/api/v1/conversations")
        .await
        .as_array()
        .unwrap()
        .clone()
}

async fn approval_status(d: &Daemon, title: &str) -> String {
    let list = d.get_ok("/api/v1/approvals").await;
    list.as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == title)
        .unwrap()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

fn fences_balanced(text: &str) -> bool {
    text.lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        % 2
        == 0
}

async fn wait_approval(sl: &FakeSlack, channel: &str, title: &str) -> Shown {
    sl.wait(&format!("an approval for {title:?}"), |f| {
        f.shown(channel)
            .into_iter()
            .find(|m| m.text().contains(title) && m.buttons().len() == 3)
    })
    .await
}

async fn wait_ephemeral(sl: &FakeSlack, user: &str, n: usize) -> String {
    sl.wait(&format!("ephemeral answer {n} to {user}"), |f| {
        let mine: Vec<_> = f
            .ephemerals()
            .into_iter()
            .filter(|e| e.user == user)
            .collect();
        mine.get(n - 1).map(|e| e.text.clone())
    })
    .await
}

#[tokio::test]
async fn slack_dms_and_mentioned_threads_are_conversations_replying_in_their_thread() {
    let s = start("socket").await;
    let (sl, d) = (&s.sl, &s.d);

    // A DM is one conversation; replies go to the DM itself, not a thread.
    sl.rate_limit("chat.postMessage", 1, 1);
    say(
        sl,
        "D1",
        ALICE,
        "/new codex hello world",
        "100.000001",
        None,
    );
    let r = sl.wait_shown("D1", "echo: hello world").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    assert_eq!(r.thread_ts, None);
    let status = sl.wait_shown("D1", "Done").await;
    assert!(status.updates >= 1, "the status message is edited in place");
    assert!(
        sl.calls()
            .iter()
            .any(|c| c.method == "chat.postMessage" && c.status == 429),
        "the first send was rate limited and retried"
    );
    say(
        sl,
        "D1",
        ALICE,
        "second, in a thread of the DM",
        "100.000002",
        Some("100.000001"),
    );
    let r = sl.wait_shown("D1", "echo: second").await;
    assert!(
        r.text().contains("remembers 1"),
        "the same DM conversation: {}",
        r.text()
    );

    // In a channel: a mention starts a thread conversation; replies go into the thread.
    let mention = format!("<@{BOT_USER}> first thread");
    say(sl, "C1", ALICE, &mention, "200.000001", None);
    let r = sl.wait_shown("C1", "echo: first thread").await;
    assert_eq!(r.thread_ts.as_deref(), Some("200.000001"));
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    // A reply in that thread (no mention needed) continues it, from anyone allowed.
    say(
        sl,
        "C1",
        BOB,
        "more please",
        "200.000002",
        Some("200.000001"),
    );
    let r = sl.wait_shown("C1", "echo: more please").await;
    assert_eq!(r.thread_ts.as_deref(), Some("200.000001"));
    assert!(r.text().contains("remembers 1"), "{}", r.text());
    // Another mention is another conversation.
    say(
        sl,
        "C1",
        BOB,
        &format!("<@{BOT_USER}> second thread"),
        "300.000001",
        None,
    );
    let r = sl.wait_shown("C1", "echo: second thread").await;
    assert_eq!(r.thread_ts.as_deref(), Some("300.000001"));
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    // Channel talk that is not for tether is ignored.
    say(sl, "C1", ALICE, "lunch anyone?", "400.000001", None);
    say(
        sl,
        "C1",
        ALICE,
        "in some other thread",
        "400.000002",
        Some("400.000001"),
    );

    // mrkdwn: agent output cannot ping the channel or forge links; Markdown is converted.
    say(
        sl,
        "D1",
        ALICE,
        "say <!channel> & **bold**",
        "100.000003",
        None,
    );
    let r = sl.wait_shown("D1", "echo: say").await;
    assert!(
        r.section().contains("&lt;!channel&gt; &amp; *bold*"),
        "{}",
        r.section()
    );

    // A long result is split at Slack's section limit with code blocks intact.
    let mut long = String::new();
    let mut i = 0;
    while long.len() < 8_000 {
        long.push_str(&format!(
            "Paragraph {i}: the quick brown fox & the lazy dog, again.\n"
        ));
        if i % 5 == 4 {
            long.push('\n');
        }
        if i == 20 {
            long.push_str("```python\n");
            for j in 0..25 {
                long.push_str(&format!("x{j} = compute({j})  # line {j}\n"));
            }
            long.push_str("```\n\n");
        }
        i += 1;
    }
    say(sl, "D1", ALICE, &long, "100.000004", None);
    sl.wait_shown("D1", &format!("Paragraph {}:", i - 1)).await;
    let parts: Vec<Shown> = sl
        .shown("D1")
        .into_iter()
        .skip_while(|m| !m.text().contains("echo: Paragraph 0:"))
        .collect();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for p in &parts {
        assert!(p.section().chars().count() <= 3000);
        assert!(fences_balanced(&p.section()), "{}", p.section());
    }
    let code: Vec<_> = parts
        .iter()
        .filter(|p| p.section().contains("x0 = compute(0)"))
        .collect();
    assert_eq!(code.len(), 1);
    assert!(
        code[0].section().contains("x24 = compute(24)"),
        "code block kept whole"
    );

    // Progress: one status message, edited in place at most once per interval (300 ms).
    let before = sl.shown("D1").len();
    say(sl, "D1", ALICE, "stream 20 100", "100.000005", None);
    sl.wait("the streamed turn ends", |f| {
        f.shown("D1")
            .into_iter()
            .skip(before)
            .find(|m| m.text().contains("Done"))
    })
    .await;
    let status = sl
        .shown("D1")
        .into_iter()
        .skip(before)
        .find(|m| m.text().contains("Done"))
        .unwrap();
    let edits: Vec<(Instant, String)> = sl
        .calls()
        .into_iter()
        .filter(|c| c.method == "chat.update" && c.body["ts"] == status.ts.as_str())
        .map(|c| {
            (
                c.at,
                c.body["text"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let working: Vec<&(Instant, String)> =
        edits.iter().filter(|e| e.1.contains("Working")).collect();
    assert!(
        !working.is_empty(),
        "progress shown while it streams: {edits:?}"
    );
    // Throttled: far fewer edits than the 20 chunks, at most about one per interval.
    let span = working.last().unwrap().0 - working[0].0;
    assert!(
        working.len() as u128 <= 2 + span.as_millis() / 250 && working.len() < 20,
        "throttled: {} edits in {span:?}",
        working.len()
    );

    // The slash command: in a DM it acts on the DM conversation...
    sl.push("slash_commands", sl.slash("D1", ALICE, "status"));
    sl.wait_shown("D1", "queue:").await;
    // ...in a channel it starts a thread of its own.
    sl.push("slash_commands", sl.slash("C1", BOB, "new codex via slash"));
    let r = sl.wait_shown("C1", "echo: via slash").await;
    let anchor = sl.wait_shown("C1", "started a tether thread").await;
    assert_eq!(anchor.thread_ts, None);
    assert_eq!(r.thread_ts.as_deref(), Some(anchor.ts.as_str()));

    // A stranger's slash command in a channel posts nothing there: pairing is in a DM.
    sl.push("slash_commands", sl.slash("C1", CAROL, "new codex spam"));
    let answer = wait_ephemeral(sl, CAROL, 1).await;
    assert!(answer.contains("does not know you"), "{answer}");
    assert_eq!(sl.count_shown("C1", "spam"), 0);

    // Every message was handled once: three channel conversations and the DM.
    assert_eq!(conversations(d).await.len(), 4);
    assert_eq!(sl.count_shown("C1", "echo: first thread"), 1);
    assert_eq!(sl.count_shown("C1", "lunch"), 0);
    assert_eq!(sl.count_shown("C1", "other thread"), 0);
}

#[tokio::test]
async fn slack_buttons_resolve_exactly_their_approval_update_it_and_stale_ones_answer_privately() {
    let s = start("socket").await;
    let (sl, d) = (&s.sl, &s.d);
    say(
        sl,
        "C1",
        ALICE,
        &format!("<@{BOT_USER}> approve deploy prod"),
        "500.000001",
        None,
    );
    say(
        sl,
        "C1",
        BOB,
        &format!("<@{BOT_USER}> approve drop table"),
        "600.000001",
        None,
    );
    let a = wait_approval(sl, "C1", "deploy prod").await;
    let b = wait_approval(sl, "C1", "drop table").await;
    assert_eq!(a.thread_ts.as_deref(), Some("500.000001"));
    assert_eq!(b.thread_ts.as_deref(), Some("600.000001"));

    sl.push("interactive", sl.press(BOB, &b, "Deny"));
    let answer = wait_ephemeral(sl, BOB, 1).await;
    assert!(answer.contains("Denied"), "{answer}");
    assert_eq!(approval_status(d, "drop table").await, "denied");
    assert_eq!(approval_status(d, "deploy prod").await, "pending");
    let updated = sl
        .wait("the message shows the decision", |f| {
            f.shown("C1")
                .into_iter()
                .find(|m| m.ts == b.ts && m.text().contains("denied by"))
        })
        .await;
    assert!(
        updated.text().contains(BOB),
        "who decided: {}",
        updated.text()
    );
    assert!(updated.buttons().is_empty(), "buttons removed");

    // The same button again is stale: a private answer, nothing changes.
    sl.push("interactive", sl.press(BOB, &b, "Allow"));
    let answer = wait_ephemeral(sl, BOB, 2).await;
    assert!(answer.contains("no longer pending"), "{answer}");
    assert_eq!(approval_status(d, "drop table").await, "denied");
    // A's button replayed into B's thread does nothing.
    let foreign = Shown {
        thread_ts: b.thread_ts.clone(),
        ..a.clone()
    };
    sl.push("interactive", sl.press(BOB, &foreign, "Allow"));
    let answer = wait_ephemeral(sl, BOB, 3).await;
    assert!(answer.contains("another chat"), "{answer}");
    assert_eq!(approval_status(d, "deploy prod").await, "pending");
    sl.push("interactive", sl.press(ALICE, &a, "Always"));
    let answer = wait_ephemeral(sl, ALICE, 1).await;
    assert!(answer.contains("Always allowed"), "{answer}");
    sl.wait("A shows who allowed it", |f| {
        f.shown("C1").into_iter().find(|m| {
            m.ts == a.ts
                && m.text()
                    .contains(&format!("always allowed by slack:{ALICE}"))
        })
    })
    .await;

    // `/stop` as a plain message in the thread cancels its running turn.
    say(sl, "C1", ALICE, "hang", "500.000002", Some("500.000001"));
    sl.wait("the hanging turn runs", |f| {
        f.shown("C1")
            .into_iter()
            .rfind(|m| m.thread_ts.as_deref() == Some("500.000001") && m.text().contains("Working"))
    })
    .await;
    say(sl, "C1", ALICE, "/stop", "500.000003", Some("500.000001"));
    let cancelled = sl.wait_shown("C1", "The turn was cancelled").await;
    assert_eq!(cancelled.thread_ts.as_deref(), Some("500.000001"));
}

#[tokio::test]
async fn slack_socket_drops_and_disconnects_lose_no_message_and_double_none() {
    let s = start("socket").await;
    let sl = &s.sl;
    // Acknowledged, but the fake forgets the ack: the next connection delivers again.
    sl.ignore_acks(true);
    let id = sl.push(
        "events_api",
        sl.message("D1", ALICE, "one", "700.000001", None),
    );
    sl.wait_acked(&id).await;
    sl.drop_socket();
    sl.wait_connections(2).await;
    sl.wait_shown("D1", "echo: one").await;
    sl.ignore_acks(false);
    // Sent while the socket is down: delivered on the next connection.
    sl.drop_socket();
    sl.push(
        "events_api",
        sl.message("D1", ALICE, "two", "700.000002", None),
    );
    sl.wait_connections(3).await;
    sl.wait_shown("D1", "echo: two").await;
    // Slack asks for a new connection.
    sl.disconnect();
    sl.wait_connections(4).await;
    sl.push(
        "events_api",
        sl.message("D1", ALICE, "three", "700.000003", None),
    );
    sl.wait_shown("D1", "echo: three").await;
    sl.wait_shown("D1", "remembers 2").await;

    // An unknown sender gets a pairing code and no conversation until approved.
    sl.push(
        "events_api",
        sl.message("D9", CAROL, "hello", "800.000001", None),
    );
    let m = sl.wait_shown("D9", "pairing code").await;
    let code = m
        .text()
        .split("tether pair approve ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        conversations(&s.d).await.len(),
        1,
        "no conversation for a stranger"
    );
    let p =
        s.d.post_ok(&format!("/api/v1/pairings/{code}/approve"), json!({}))
            .await;
    assert_eq!(p["user_id"], CAROL);
    sl.wait_shown("D9", "You are paired").await;
    sl.push(
        "events_api",
        sl.message("D9", CAROL, "now then", "800.000002", None),
    );
    sl.wait_shown("D9", "echo: now then").await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    for needle in ["echo: one", "echo: two", "echo: three"] {
        assert_eq!(sl.count_shown("D1", needle), 1, "{needle} once");
    }
}

/// POSTs a signed (or forged) request to `/hooks/slack`.
async fn post(
    d: &Daemon,
    body: &str,
    form: bool,
    headers: &[(&'static str, String)],
) -> (u16, Value) {
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
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = within("POST /hooks/slack", req.send()).await.unwrap();
    let status = resp.status().as_u16();
    let text = within("hook body", resp.text()).await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn signed(d: &Daemon, body: &str, form: bool) -> (u16, Value) {
    let headers = fake_slack::sign(SIGNING_SECRET, fake_slack::now_secs(), body.as_bytes());
    let started = Instant::now();
    let out = post(d, body, form, &headers).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered at once"
    );
    out
}

#[tokio::test]
async fn slack_events_api_checks_signature_timestamp_and_replays_and_never_answers_5xx() {
    let s = start("events").await;
    let (sl, d) = (&s.sl, &s.d);
    let check =
        json!({"type": "url_verification", "token": "x", "challenge": "chal-9"}).to_string();
    assert_eq!(
        signed(d, &check, false).await,
        (200, json!({"challenge": "chal-9"}))
    );

    let body = sl
        .message("D1", ALICE, "over http", "900.000001", None)
        .to_string();
    let signed_at = fake_slack::now_secs();
    let headers = fake_slack::sign(SIGNING_SECRET, signed_at, body.as_bytes());
    assert_eq!(post(d, &body, false, &headers).await.0, 200);
    sl.wait_shown("D1", "echo: over http").await;
    // The same signed request again is a replay.
    assert_eq!(post(d, &body, false, &headers).await.0, 401);
    // Slack's own retry (signed anew, same event): acknowledged, not handled twice. Its
    // timestamp differs from the first's (one computed from the clock again could match
    // it when the second turned meanwhile, and then be that request's replay).
    let retry = fake_slack::sign(SIGNING_SECRET, signed_at - 1, body.as_bytes());
    assert_eq!(post(d, &body, false, &retry).await.0, 200);

    let other = sl
        .message("D1", ALICE, "forged", "900.000002", None)
        .to_string();
    let now = fake_slack::now_secs();
    let cases: Vec<(&str, Vec<(&'static str, String)>)> = vec![
        (
            "wrong secret",
            fake_slack::sign("not-the-secret", now, other.as_bytes()),
        ),
        (
            "stale",
            fake_slack::sign(SIGNING_SECRET, now - 301, other.as_bytes()),
        ),
        (
            "future",
            fake_slack::sign(SIGNING_SECRET, now + 301, other.as_bytes()),
        ),
        ("unsigned", Vec::new()),
        (
            "tampered",
            fake_slack::sign(
                SIGNING_SECRET,
                now,
                other.replace("forged", "tampered").as_bytes(),
            ),
        ),
        (
            "bad timestamp",
            vec![
                ("x-slack-request-timestamp", "soon".into()),
                ("x-slack-signature", "v0=00".into()),
            ],
        ),
    ];
    for (what, headers) in cases {
        assert_eq!(post(d, &other, false, &headers).await.0, 401, "{what}");
    }
    // Signed but unreadable: refused without a 5xx.
    assert_eq!(signed(d, "{not json", false).await.0, 400);
    assert_eq!(signed(d, "a=1&b=2", true).await.0, 400);
    assert_eq!(signed(d, "payload=%7Bnope", true).await.0, 400);
    assert_eq!(
        signed(d, &json!({"type": "event_callback"}).to_string(), false)
            .await
            .0,
        200
    );

    // Interactivity and the slash command arrive as signed forms.
    let cmd = fake_slack::form(&sl.slash("D1", ALICE, "new codex approve ship it"));
    assert_eq!(signed(d, &cmd, true).await.0, 200);
    let card = wait_approval(sl, "D1", "ship it").await;
    assert_eq!(card.thread_ts, None);
    let press = fake_slack::form(&json!({"payload": sl.press(ALICE, &card, "Deny").to_string()}));
    assert_eq!(signed(d, &press, true).await.0, 200);
    let answer = wait_ephemeral(sl, ALICE, 1).await;
    assert!(answer.contains("Denied"), "{answer}");
    assert_eq!(approval_status(d, "ship it").await, "denied");

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sl.count_shown("D1", "echo: over http"), 1);
    assert_eq!(sl.count_shown("D1", "forged"), 0);
    assert_eq!(sl.count_shown("D1", "tampered"), 0);
}

#[tokio::test]
async fn slack_doctor_checks_the_credentials() {
    let sl = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tether.toml");
    let write = |cfg: &str| {
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:9\"\ndata_dir = {:?}\nworkspace_roots = [{:?}]\n\n{cfg}",
                dir.path().join("data").display().to_string(),
                dir.path().display().to_string(),
            ),
        )
        .unwrap();
    };
    let doctor = || async {
        let out = within(
            "tether doctor",
            tokio::process::Command::new(bin_path("tether"))
                .arg("--config")
                .arg(&config)
                .arg("doctor")
                .env_remove("TETHER_HOME")
                .output(),
        )
        .await
        .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    write(&sl.config("socket", &[ALICE], ""));
    let out = doctor().await;
    assert!(
        out.contains(&format!("slack: ok: bot {BOT_USER} in team Fake Team")),
        "{out}"
    );
    assert!(out.contains("app-level token accepted"), "{out}");
    write(
        &sl.config("socket", &[ALICE], "")
            .replace(fake_slack::BOT_TOKEN, "xoxb-wrong"),
    );
    let out = doctor().await;
    assert!(
        out.contains("slack: ERROR: bot token") && out.contains("invalid_auth"),
        "{out}"
    );
    write(
        &sl.config("socket", &[ALICE], "")
            .replace(fake_slack::APP_TOKEN, "xapp-wrong"),
    );
    let out = doctor().await;
    assert!(out.contains("slack: ERROR: app-level token"), "{out}");
}

const PNG_1X1: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R', 0, 0, 0,
    1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0x0a, b'I', b'D', b'A', b'T',
    0x78, 0x9c, 0x63, 0, 1, 0, 0, 5, 0, 1, 0x0d, 0x0a, 0x2d, 0xb4, 0, 0, 0, 0, b'I', b'E', b'N',
    b'D', 0xae, 0x42, 0x60, 0x82,
];

#[tokio::test]
async fn slack_files_reach_the_agent_only_from_slack_and_file_shares_them_into_the_chat() {
    let s = start("socket").await;
    let (sl, d) = (&s.sl, &s.d);
    let url = sl.host_file("F1", PNG_1X1);
    sl.push(
        "events_api",
        sl.file_message(
            "D1",
            ALICE,
            "what is on it?",
            "950.000001",
            &[("F1", "chart.png", "image/png", &url)],
        ),
    );
    let shown = sl.wait_shown("D1", "echo: what is on it?").await;
    assert!(
        shown.text().contains(".tether/attachments/"),
        "{}",
        shown.text()
    );
    let copy = d
        .attachment_copies()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with("chart.png"))
        .expect("the file's copy");
    assert_eq!(std::fs::read(copy).unwrap(), PNG_1X1);

    // A file URL elsewhere never gets the bot token: refused, the caption still goes.
    sl.push(
        "events_api",
        sl.file_message(
            "D1",
            ALICE,
            "and this one",
            "950.000002",
            &[(
                "F2",
                "secret.txt",
                "text/plain",
                "http://127.0.0.1:9/files/F2",
            )],
        ),
    );
    let refused = sl.wait_shown("D1", "attachment_unavailable").await;
    assert!(refused.text().contains("secret.txt"), "{}", refused.text());
    sl.wait_shown("D1", "echo: and this one").await;

    // `/file` uploads the file and shares it into the chat (into the thread in a channel).
    std::fs::write(d.work_dir().join("report.txt"), b"all green\n").unwrap();
    say(sl, "D1", ALICE, "/file report.txt", "950.000003", None);
    let shared = sl
        .wait("a shared file", |f| {
            f.shown("D1").into_iter().find(|m| !m.files.is_empty())
        })
        .await;
    let (name, bytes) = sl.uploaded(&shared.files[0]).unwrap();
    assert_eq!(
        (name.as_str(), bytes.as_slice()),
        ("report.txt", &b"all green\n"[..])
    );
    say(
        sl,
        "C1",
        ALICE,
        &format!("<@{BOT_USER}> /file report.txt"),
        "960.000001",
        None,
    );
    let shared = sl
        .wait("a file shared in the thread", |f| {
            f.shown("C1").into_iter().find(|m| !m.files.is_empty())
        })
        .await;
    assert_eq!(shared.thread_ts.as_deref(), Some("960.000001"));
}
