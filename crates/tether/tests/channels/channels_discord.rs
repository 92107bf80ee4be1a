//! End to end: Discord against a fake Discord on loopback (REST + Gateway WebSocket),
//! with a real `tether serve` and the fake agent (registered as `codex`): DMs and
//! threads as conversations, the Gateway's resume after a dropped socket, op 7, op 9 and
//! a dead heartbeat, buttons over the Gateway and over the signed HTTP interactions
//! endpoint, rate limits, pairing, and the doctor's credential check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::fake_discord::{BOT_ID, FakeDiscord, RateLimit, Shown};
use tether_testkit::fake_discord_interactions::{Interactions, SignedRequest};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

const ALICE: &str = "111";
const BOB: &str = "222";
const CAROL: &str = "333";
const GUILD: &str = "900";
const GENERAL: &str = "901";
/// DM channels of Alice and Bob.
const DM_A: &str = "811";
const DM_B: &str = "822";

struct Setup {
    dc: FakeDiscord,
    d: Daemon,
    _state: tempfile::TempDir,
}

async fn start(extra: &str) -> Setup {
    let dc = FakeDiscord::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "[agents.codex]\ndriver = \"acp\"\ncommand = {:?}\nargs = [\"--state-dir\", {:?}]\n\n{}",
        bin_path("fake-agent").display().to_string(),
        state.path().display().to_string(),
        dc.config(&[ALICE, BOB], extra)
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    dc.wait_ready().await;
    Setup {
        dc,
        d,
        _state: state,
    }
}

async fn conversations(d: &Daemon) -> Vec<Value> {
    d.get_ok("/api/v1/conversations")
        .await
        .as_array()
        .unwrap()
        .clone()
}

async fn session_of(d: &Daemon, needle: &str) -> String {
    let all = conversations(d).await;
    let c = all
        .iter()
        .find(|c| c["title"].as_str().unwrap().contains(needle))
        .unwrap_or_else(|| panic!("no conversation titled like {needle:?}: {all:?}"));
    let c = d
        .get_ok(&format!(
            "/api/v1/conversations/{}",
            c["id"].as_str().unwrap()
        ))
        .await;
    c["binding"]["session_id"].as_str().unwrap().to_string()
}

fn fences_balanced(text: &str) -> bool {
    text.lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        % 2
        == 0
}

fn mention(text: &str) -> String {
    format!("<@{BOT_ID}> {text}")
}

#[tokio::test]
async fn discord_dms_and_threads_are_conversations_and_long_results_split_at_2000() {
    let s = start("").await;
    let (dc, d) = (&s.dc, &s.d);
    // A DM is one conversation.
    dc.message(DM_A, None, ALICE, "/new codex hello world");
    let r = dc.wait_shown(DM_A, "echo: hello world").await;
    assert!(r.content.contains("remembers 0"), "{}", r.content);
    let status = dc.wait_shown(DM_A, "Done").await;
    assert!(status.edits >= 1, "the status message is edited in place");
    let first = session_of(d, "DM with").await;
    dc.message(DM_A, None, ALICE, "second");
    let r = dc.wait_shown(DM_A, "echo: second").await;
    assert!(r.content.contains("remembers 1"), "{}", r.content);
    assert_eq!(session_of(d, "DM with").await, first);

    // In a server channel a mention starts a thread, and the thread is the conversation.
    let m1 = dc.message(GENERAL, Some(GUILD), ALICE, &mention("fix the build"));
    let r = dc.wait_shown(&m1, "echo: fix the build").await;
    assert!(r.content.contains("remembers 0"), "{}", r.content);
    assert_eq!(dc.threads().get(&m1).map(String::as_str), Some(GENERAL));
    assert_eq!(
        dc.shown(GENERAL).len(),
        0,
        "nothing is posted in the channel itself"
    );
    // In the thread, no mention is needed; it continues the same session.
    dc.message(&m1, Some(GUILD), BOB, "and the tests");
    let r = dc.wait_shown(&m1, "echo: and the tests").await;
    assert!(r.content.contains("remembers 1"), "{}", r.content);
    // A channel message without a mention is not for tether.
    dc.message(GENERAL, Some(GUILD), ALICE, "lunch?");
    // Another mention: another thread, another conversation.
    let m2 = dc.message(GENERAL, Some(GUILD), BOB, &mention("write docs"));
    let r = dc.wait_shown(&m2, "echo: write docs").await;
    assert!(r.content.contains("remembers 0"), "{}", r.content);
    assert_eq!(conversations(d).await.len(), 3);
    assert_ne!(
        session_of(d, "fix the build").await,
        session_of(d, "write docs").await
    );

    // A 6 000-character result arrives in parts of at most 2 000, code blocks intact.
    let mut long = String::new();
    let mut i = 0;
    while long.len() < 6_000 {
        long.push_str(&format!(
            "Paragraph {i}: the quick brown fox jumps over the lazy dog.\n"
        ));
        if i % 5 == 4 {
            long.push('\n');
        }
        if i == 20 {
            long.push_str("```python\n");
            for j in 0..15 {
                long.push_str(&format!("x{j} = compute({j})  # line {j}\n"));
            }
            long.push_str("```\n\n");
        }
        i += 1;
    }
    dc.message(DM_A, None, ALICE, &long);
    dc.wait_shown(DM_A, &format!("Paragraph {}:", i - 1)).await;
    let parts: Vec<Shown> = dc
        .shown(DM_A)
        .into_iter()
        .skip_while(|m| !m.content.contains("echo: Paragraph 0:"))
        .collect();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for p in &parts {
        assert!(p.content.chars().count() <= 2000);
        assert!(fences_balanced(&p.content), "{}", p.content);
    }
    let code: Vec<_> = parts
        .iter()
        .filter(|p| p.content.contains("x0 = compute(0)"))
        .collect();
    assert_eq!(code.len(), 1);
    assert!(
        code[0].content.contains("x14 = compute(14)"),
        "code block kept whole"
    );
    // Sends carry a nonce (Discord drops a repeat) and never ping anyone.
    let sends: Vec<_> = dc
        .calls()
        .into_iter()
        .filter(|c| c.route == "POST /channels/{id}/messages")
        .collect();
    assert!(sends.iter().all(|c| c.body["enforce_nonce"] == true
        && c.body["nonce"].as_str().is_some_and(|n| n.len() <= 25)
        && c.body["allowed_mentions"] == json!({"parse": []})));
}

/// How many messages in `channel` contain `needle` (the fake keeps one per nonce).
fn count(dc: &FakeDiscord, channel: &str, needle: &str) -> usize {
    dc.count_shown(channel, needle)
}

#[tokio::test]
async fn discord_gateway_resumes_after_a_drop_op7_op9_and_a_dead_heartbeat_without_loss_or_doubles()
{
    let s = start("").await;
    let dc = &s.dc;
    let session = dc.wait_ready().await;
    // Identify asks for the intents tether needs (message content and DMs included).
    let ops = dc.ops();
    let identify = ops.iter().find(|o| o.op == 2).unwrap();
    let intents = identify.d["intents"].as_u64().unwrap();
    assert_eq!(intents & (1 << 15), 1 << 15, "message content");
    assert_eq!(intents & (1 << 12), 1 << 12, "direct messages");
    assert_eq!(intents & (1 << 9), 1 << 9, "server messages");
    dc.message(DM_A, None, ALICE, "one");
    dc.wait_shown(DM_A, "echo: one").await;

    // A dropped socket: what is sent meanwhile arrives on resume, once; the replay
    // also repeats messages tether already had.
    dc.set_resume_overlap(3);
    dc.drop_socket();
    dc.message(DM_A, None, ALICE, "two");
    dc.message(DM_A, None, ALICE, "three");
    dc.wait_shown(DM_A, "echo: three").await;
    let resume = dc
        .wait("a resume", |f| f.ops().into_iter().find(|o| o.op == 6))
        .await;
    assert_eq!(resume.d["session_id"], session.as_str());
    assert!(resume.d["seq"].as_i64().unwrap() >= 2, "{:?}", resume.d);
    assert!(
        dc.repeated() >= 2,
        "the resume repeated messages tether had"
    );

    // op 7: reconnect and resume.
    let before = dc.connections();
    dc.send_op(7, Value::Null);
    dc.wait("a new connection after op 7", |f| {
        (f.connections() > before && f.ops().iter().filter(|o| o.op == 6).count() >= 2)
            .then_some(())
    })
    .await;
    dc.wait_ready().await;
    dc.message(DM_A, None, ALICE, "four");
    dc.wait_shown(DM_A, "echo: four").await;

    // A heartbeat that is never ACKed: the connection is dead; tether resumes.
    dc.set_heartbeat_ack(false);
    let resumes = dc.ops().iter().filter(|o| o.op == 6).count();
    dc.wait("a resume after missing ACKs", |f| {
        (f.ops().iter().filter(|o| o.op == 6).count() > resumes).then_some(())
    })
    .await;
    dc.set_heartbeat_ack(true);
    dc.wait_ready().await;
    dc.message(DM_A, None, ALICE, "five");
    dc.wait_shown(DM_A, "echo: five").await;

    // op 9 (not resumable): a fresh Identify, a new session.
    let identifies = dc.ops().iter().filter(|o| o.op == 2).count();
    dc.send_op(9, json!(false));
    let fresh = dc
        .wait("a new identify after op 9", |f| {
            (f.ops().iter().filter(|o| o.op == 2).count() > identifies).then(|| f.ops())
        })
        .await;
    assert!(fresh.len() > identifies);
    let now = dc.wait_ready().await;
    assert_ne!(now, session);
    dc.message(DM_A, None, ALICE, "six");
    dc.wait_shown(DM_A, "echo: six").await;

    // Heartbeats carry the last sequence number.
    let beat = dc.ops().into_iter().rfind(|o| o.op == 1).unwrap();
    assert!(beat.d.is_i64() || beat.d.is_null(), "{:?}", beat.d);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in ["one", "two", "three", "four", "five", "six"] {
        assert_eq!(count(dc, DM_A, &format!("echo: {n}")), 1, "{n}");
    }
    let turns =
        s.d.get_ok(&format!(
            "/api/v1/sessions/{}/turns",
            session_of(&s.d, "DM with").await
        ))
        .await;
    assert_eq!(turns.as_array().unwrap().len(), 6, "one turn per message");
}

async fn wait_buttons(dc: &FakeDiscord, channel: &str, title: &str) -> Shown {
    dc.wait(&format!("buttons for {title:?}"), |f| {
        f.shown(channel)
            .into_iter()
            .find(|m| m.content.contains(title) && m.buttons().len() == 3)
    })
    .await
}

fn button(m: &Shown, label: &str) -> String {
    m.buttons().into_iter().find(|b| b.0 == label).unwrap().1
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

/// Presses over the Gateway; the ephemeral answer of its callback.
async fn press(
    dc: &FakeDiscord,
    channel: &str,
    guild: Option<&str>,
    m: &Shown,
    user: &str,
    id: &str,
) -> String {
    let ix = dc.press(channel, guild, &m.id, user, id);
    let (_, body) = dc
        .wait("the interaction callback", |f| {
            f.callbacks().into_iter().find(|(i, _)| *i == ix)
        })
        .await;
    assert_eq!(body["type"], 4);
    assert_eq!(body["data"]["flags"], 64, "ephemeral");
    body["data"]["content"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn discord_buttons_resolve_exactly_their_approval_edit_it_and_stale_ones_get_an_ephemeral_answer()
 {
    let s = start("").await;
    let (dc, d) = (&s.dc, &s.d);
    dc.message(DM_A, None, ALICE, "approve deploy prod");
    let thread = dc.message(GENERAL, Some(GUILD), BOB, &mention("approve drop table"));
    let a = wait_buttons(dc, DM_A, "deploy prod").await;
    let b = wait_buttons(dc, &thread, "drop table").await;

    let answer = press(dc, &thread, Some(GUILD), &b, BOB, &button(&b, "Deny")).await;
    assert!(answer.contains("Denied"), "{answer}");
    assert_eq!(approval_status(d, "drop table").await, "denied");
    assert_eq!(approval_status(d, "deploy prod").await, "pending");
    let edited = dc
        .wait("the approval shows the decision", |f| {
            f.shown(&thread)
                .into_iter()
                .find(|m| m.id == b.id && m.content.contains("denied by"))
        })
        .await;
    assert!(
        edited.content.contains("User 222"),
        "who decided: {}",
        edited.content
    );
    assert!(edited.buttons().is_empty(), "buttons removed");
    dc.wait_shown(&thread, "approval: denied").await;

    // The same button again is stale.
    let answer = press(dc, &thread, Some(GUILD), &b, BOB, &button(&b, "Allow")).await;
    assert!(answer.contains("no longer pending"), "{answer}");
    // A's button pressed in another chat does nothing...
    let answer = press(dc, &thread, Some(GUILD), &a, BOB, &button(&a, "Allow")).await;
    assert!(answer.contains("another chat"), "{answer}");
    assert_eq!(approval_status(d, "deploy prod").await, "pending");
    // ...and a stranger cannot answer.
    let answer = press(dc, DM_A, None, &a, CAROL, &button(&a, "Allow")).await;
    assert!(answer.contains("not allowed"), "{answer}");
    // In its own chat it resolves A.
    let answer = press(dc, DM_A, None, &a, ALICE, &button(&a, "Always")).await;
    assert!(answer.contains("Always allowed"), "{answer}");
    dc.wait_shown(DM_A, "approval: allowed_always").await;
}

async fn post(d: &Daemon, r: &SignedRequest) -> (u16, Value) {
    let mut req = d
        .client
        .post(d.url("/hooks/discord"))
        .header("content-type", "application/json")
        .body(r.body.clone());
    for (k, v) in &r.headers {
        req = req.header(*k, v);
    }
    let resp = within("POST /hooks/discord", req.send()).await.unwrap();
    let status = resp.status().as_u16();
    let text = within("hook body", resp.text()).await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn discord_http_interactions_check_signatures_and_refuse_forged_replayed_and_malformed() {
    let keys = Interactions::new();
    let s = start(&format!(
        "mode = \"http\"\npublic_key = \"{}\"\n",
        keys.public_key()
    ))
    .await;
    let (dc, d) = (&s.dc, &s.d);
    // Discord's endpoint check.
    assert_eq!(
        post(d, &keys.sign(&Interactions::ping())).await,
        (200, json!({"type": 1}))
    );
    assert_eq!(post(d, &keys.forge(&Interactions::ping())).await.0, 401);

    dc.message(DM_A, None, ALICE, "approve ship it");
    let a = wait_buttons(dc, DM_A, "ship it").await;
    let ix = dc.button_interaction(DM_A, None, &a.id, ALICE, &button(&a, "Deny"));
    // Forged, tampered, stale, unsigned, malformed: refused, nothing done, never a 5xx.
    assert_eq!(post(d, &keys.forge(&ix)).await.0, 401);
    assert_eq!(post(d, &keys.tamper(&ix)).await.0, 401);
    assert_eq!(post(d, &keys.sign_at(&ix, 6 * 60)).await.0, 401);
    let unsigned = SignedRequest {
        headers: Vec::new(),
        body: ix.to_string(),
    };
    assert_eq!(post(d, &unsigned).await.0, 401);
    let mut bad_hex = keys.sign(&ix);
    bad_hex.headers[0].1 = "zz".repeat(64);
    assert_eq!(post(d, &bad_hex).await.0, 401);
    assert_eq!(post(d, &keys.sign_raw("{not json")).await.0, 400);
    assert_eq!(approval_status(d, "ship it").await, "pending");

    // Signed: resolved, answered ephemerally in the response itself.
    let started = Instant::now();
    let (status, body) = post(d, &keys.sign(&ix)).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "within Discord's 3 s"
    );
    assert_eq!(body["type"], 4);
    assert_eq!(body["data"]["flags"], 64);
    assert!(
        body["data"]["content"].as_str().unwrap().contains("Denied"),
        "{body}"
    );
    assert_eq!(approval_status(d, "ship it").await, "denied");
    // The same request again is a replay.
    assert_eq!(post(d, &keys.sign(&ix)).await.0, 401);
    dc.wait("the approval shows the decision", |f| {
        f.shown(DM_A)
            .into_iter()
            .find(|m| m.id == a.id && m.content.contains("denied by"))
    })
    .await;
}

#[tokio::test]
async fn discord_rate_limits_are_honoured_per_route_and_globally() {
    let s = start("").await;
    let dc = &s.dc;
    // A 429 on the message route: the next try waits at least `retry_after`.
    dc.rate_limit(
        "POST /channels/{id}/messages",
        &[RateLimit {
            retry_after: 1.2,
            global: false,
        }],
    );
    dc.message(DM_A, None, ALICE, "limited");
    dc.wait_shown(DM_A, "echo: limited").await;
    let sends: Vec<_> = dc
        .calls()
        .into_iter()
        .filter(|c| c.route == "POST /channels/{id}/messages")
        .collect();
    assert_eq!(sends[0].status, 429);
    assert!(
        sends[1].at - sends[0].at >= Duration::from_millis(1200),
        "retry_after honoured"
    );

    // A global 429 holds every route.
    dc.rate_limit(
        "POST /channels/{id}/messages",
        &[RateLimit {
            retry_after: 1.0,
            global: true,
        }],
    );
    dc.message(DM_B, None, BOB, "globally");
    dc.wait_shown(DM_B, "echo: globally").await;

    // An exhausted bucket (Remaining: 0) makes the next call to it wait for the reset.
    dc.exhaust_bucket(DM_A, 1.0);
    dc.message(DM_A, None, ALICE, "bucket");
    dc.wait_shown(DM_A, "echo: bucket").await;
    assert!(
        dc.violations().is_empty(),
        "calls while told to wait: {:?}",
        dc.violations()
    );
    for n in ["limited", "bucket"] {
        assert_eq!(count(dc, DM_A, &format!("echo: {n}")), 1);
    }
    assert_eq!(count(dc, DM_B, "echo: globally"), 1);
}

#[tokio::test]
async fn discord_unknown_senders_get_a_pairing_code_and_no_thread() {
    let s = start("").await;
    let dc = &s.dc;
    dc.message(GENERAL, Some(GUILD), CAROL, &mention("let me in"));
    let m = dc.wait_shown(GENERAL, "pairing code").await;
    assert!(dc.threads().is_empty(), "no thread for a stranger");
    assert!(conversations(&s.d).await.is_empty());
    let code = m
        .content
        .split("tether pair approve ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    let p =
        s.d.post_ok(&format!("/api/v1/pairings/{code}/approve"), json!({}))
            .await;
    assert_eq!(p["user_id"], CAROL);
    dc.wait_shown(GENERAL, "You are paired").await;
    let t = dc.message(GENERAL, Some(GUILD), CAROL, &mention("now then"));
    dc.wait_shown(&t, "echo: now then").await;
}

#[tokio::test]
async fn discord_doctor_checks_the_bot_token() {
    let s = start("").await;
    let out = within(
        "tether doctor",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(s.d.home.path().join("tether.toml"))
            .arg("doctor")
            .env_remove("TETHER_HOME")
            .output(),
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("discord: ok: signed in as tether-bot"),
        "{text}"
    );
    assert!(s.dc.calls().iter().any(|c| c.route == "GET /users/@me"));
    // A wrong token is reported, not hidden.
    let cfg = std::fs::read_to_string(s.d.home.path().join("tether.toml")).unwrap();
    let bad = s.d.home.path().join("bad.toml");
    std::fs::write(&bad, cfg.replace("fake-discord-bot-token", "wrong")).unwrap();
    let out = within(
        "tether doctor (wrong token)",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(&bad)
            .arg("doctor")
            .env_remove("TETHER_HOME")
            .output(),
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("discord: ERROR: "), "{text}");
    assert!(!text.contains("wrong"), "the token is not printed: {text}");
}

#[tokio::test]
async fn discord_files_reach_the_agent_and_file_sends_a_working_directory_file() {
    let s = start("").await;
    let (dc, d) = (&s.dc, &s.d);
    let url = dc.add_attachment("notes.txt", b"remember the milk\n");
    dc.message_with_file(DM_A, ALICE, "read this", "notes.txt", &url, 18);
    let shown = dc.wait_shown(DM_A, "echo: read this").await;
    assert!(
        shown.content.contains(".tether/attachments/"),
        "{}",
        shown.content
    );
    let copied = d
        .attachment_copies()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with("notes.txt"))
        .expect("the attachment's copy");
    assert_eq!(std::fs::read(copied).unwrap(), b"remember the milk\n");

    std::fs::create_dir_all(d.work_dir().join("out")).unwrap();
    std::fs::write(d.work_dir().join("out/report.txt"), b"all green\n").unwrap();
    dc.message(DM_A, None, ALICE, "/file out/report.txt");
    let sent = dc
        .wait("the file message", |f| {
            f.shown(DM_A).into_iter().find_map(|m| m.file)
        })
        .await;
    assert_eq!(sent, ("report.txt".to_string(), b"all green\n".to_vec()));
}

#[tokio::test]
async fn discord_a_restart_resumes_the_stored_session_so_messages_sent_meanwhile_arrive_once() {
    let mut s = start("").await;
    let session = s.dc.wait_ready().await;
    s.dc.message(DM_A, None, ALICE, "remember apples");
    s.dc.wait_shown(DM_A, "echo: remember apples").await;
    s.dc.message(DM_A, None, ALICE, "approve launch");
    let card = wait_buttons(&s.dc, DM_A, "launch").await;
    let before = session_of(&s.d, "DM with").await;

    s.d.kill9().await;
    s.dc.wait("the fake sees the socket close", |f| {
        (!f.connected()).then_some(())
    })
    .await;
    // Written while tether is down: Discord keeps it for the session.
    s.dc.message(DM_A, None, ALICE, "while you were out");
    s.d.relaunch().await;

    let resume =
        s.dc.wait("a resume of the stored session", |f| {
            f.ops().into_iter().rfind(|o| o.op == 6)
        })
        .await;
    assert_eq!(resume.d["session_id"], session.as_str());
    assert!(
        !s.dc.ops().iter().any(|o| o.op == 2 && o.conn > resume.conn),
        "no new identify"
    );
    let r = s.dc.wait_shown(DM_A, "echo: while you were out").await;
    assert!(r.content.contains("remember apples"), "{}", r.content);
    assert_eq!(session_of(&s.d, "DM with").await, before);
    s.dc.wait("the approval says expired", |f| {
        f.shown(DM_A)
            .into_iter()
            .find(|m| m.id == card.id && m.content.contains("expired"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in [
        "echo: remember apples",
        "echo: while you were out",
        "asks for permission",
    ] {
        assert_eq!(count(&s.dc, DM_A, n), 1, "{n}");
    }
}
