//! End to end: Feishu against a fake Open API on loopback, events POSTed to a real
//! `tether serve` (encrypted and signed unless a test says otherwise), with the fake
//! agent (registered as `codex` too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::fake_feishu::{Events, Failure, FakeFeishu, Sealed, Shown};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

const ALICE: &str = "ou_alice";
const BOB: &str = "ou_bob";
const CAROL: &str = "ou_carol";
const TOKEN: &str = "verification-token-1";
const KEY: &str = "encrypt-key-1";

struct Setup {
    fs: FakeFeishu,
    ev: Events,
    d: Daemon,
    _state: tempfile::TempDir,
}

async fn start(encrypt_key: Option<&str>) -> Setup {
    let fs = FakeFeishu::start().await;
    let ev = Events::new(TOKEN, encrypt_key);
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "[agents.codex]\ndriver = \"acp\"\ncommand = {:?}\nargs = [\"--state-dir\", {:?}]\n\n{}",
        bin_path("fake-agent").display().to_string(),
        state.path().display().to_string(),
        fs.config(&ev, &[ALICE, BOB], "")
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    Setup {
        fs,
        ev,
        d,
        _state: state,
    }
}

/// POSTs a sealed callback to `/hooks/feishu`; returns the status and JSON body.
async fn post(d: &Daemon, sealed: &Sealed) -> (u16, Value) {
    let mut req = d
        .client
        .post(d.url("/hooks/feishu"))
        .header("content-type", "application/json")
        .body(sealed.body.clone());
    for (k, v) in &sealed.headers {
        req = req.header(*k, v);
    }
    let resp = within("POST /hooks/feishu", req.send()).await.unwrap();
    let status = resp.status().as_u16();
    let text = within("hook body", resp.text()).await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn say(s: &Setup, chat: &str, chat_type: &str, user: &str, text: &str) {
    let sealed = s.ev.seal(&s.ev.message(chat, chat_type, user, text, true));
    let started = Instant::now();
    let (status, body) = post(&s.d, &sealed).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered at once"
    );
}

async fn conversations(d: &Daemon) -> Vec<Value> {
    d.get_ok("/api/v1/conversations")
        .await
        .as_array()
        .unwrap()
        .clone()
}

async fn session_in(d: &Daemon, needle: &str) -> String {
    let all = conversations(d).await;
    let c = all
        .iter()
        .find(|c| c["title"].as_str().unwrap().contains(needle))
        .unwrap();
    let c = d
        .get_ok(&format!(
            "/api/v1/conversations/{}",
            c["id"].as_str().unwrap()
        ))
        .await;
    c["binding"]["session_id"].as_str().unwrap().to_string()
}

/// Successful sends whose content contains `needle`.
fn delivered(fs: &FakeFeishu, needle: &str) -> usize {
    fs.calls()
        .iter()
        .filter(|c| {
            c.route == "POST /open-apis/im/v1/messages"
                && c.status == 200
                && c.body["content"].as_str().unwrap().contains(needle)
        })
        .count()
}

fn fences_balanced(text: &str) -> bool {
    text.lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        % 2
        == 0
}

#[tokio::test]
async fn feishu_sessions_follow_ups_new_and_long_results() {
    let s = start(Some(KEY)).await;
    let (fs, d) = (&s.fs, &s.d);
    // The URL check of the event subscription.
    let (status, body) = post(d, &s.ev.seal(&s.ev.url_verification("chal-123"))).await;
    assert_eq!((status, body), (200, json!({"challenge": "chal-123"})));

    let chat = "oc_p2p_alice";
    say(&s, chat, "p2p", ALICE, "/new codex hello world").await;
    let r = fs.wait_shown(chat, "echo: hello world").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    let status = fs.wait_shown(chat, "Done").await;
    assert!(status.updates >= 1, "the status message is edited in place");
    assert_eq!(
        status.msg_type, "interactive",
        "a card: updatable without limits"
    );
    let first = session_in(d, "Feishu").await;

    say(&s, chat, "p2p", ALICE, "second").await;
    let r = fs.wait_shown(chat, "echo: second").await;
    assert!(r.text().contains("remembers 1"), "{}", r.text());
    assert_eq!(session_in(d, "Feishu").await, first);

    say(&s, chat, "p2p", ALICE, "/status").await;
    let st = fs.wait_shown(chat, "queue:").await;
    assert!(st.text().contains(&first[..8]), "{}", st.text());

    say(&s, chat, "p2p", ALICE, "/new").await;
    fs.wait_shown(chat, "the next message starts a new codex session")
        .await;
    say(&s, chat, "p2p", ALICE, "third").await;
    let r = fs.wait_shown(chat, "echo: third").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    assert_ne!(session_in(d, "Feishu").await, first);

    // A 10 000-character result arrives split into well-formed parts.
    let mut long = String::new();
    let mut i = 0;
    while long.len() < 10_000 {
        long.push_str(&format!(
            "Paragraph {i}: 敏捷的棕色狐狸 jumps over the lazy dog, again and again.\n"
        ));
        if i % 5 == 4 {
            long.push('\n');
        }
        if i == 30 {
            long.push_str("```python\n");
            for j in 0..25 {
                long.push_str(&format!("x{j} = compute({j})  # line {j}\n"));
            }
            long.push_str("```\n\n");
        }
        i += 1;
    }
    say(&s, chat, "p2p", ALICE, &long).await;
    fs.wait_shown(chat, &format!("Paragraph {}:", i - 1)).await;
    let parts: Vec<Shown> = fs
        .shown(chat)
        .into_iter()
        .skip_while(|m| !m.text().contains("echo: Paragraph 0:"))
        .collect();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for p in &parts {
        assert!(p.text().chars().count() <= 4000);
        assert!(fences_balanced(&p.text()), "{}", p.text());
    }
    let joined: String = parts.iter().map(Shown::text).collect::<Vec<_>>().join("\n");
    for line in long.lines().filter(|l| !l.trim().is_empty()) {
        if !line.starts_with("```") {
            assert_eq!(joined.matches(line).count(), 1, "{line:?}");
        }
    }
    let code: Vec<_> = parts
        .iter()
        .filter(|p| p.text().contains("x0 = compute(0)"))
        .collect();
    assert_eq!(code.len(), 1);
    assert!(
        code[0].text().contains("x24 = compute(24)"),
        "code block kept whole"
    );
}

async fn wait_card(fs: &FakeFeishu, chat: &str, title: &str) -> Shown {
    fs.wait(&format!("a card for {title:?}"), |f| {
        f.shown(chat).into_iter().find(|m| {
            m.msg_type == "interactive" && m.text().contains(title) && m.buttons().len() == 3
        })
    })
    .await
}

fn value(card: &Shown, label: &str) -> Value {
    card.buttons().into_iter().find(|b| b.0 == label).unwrap().1
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

async fn press(s: &Setup, user: &str, card: &Shown, value: &Value) -> String {
    let (status, body) = post(&s.d, &s.ev.seal(&s.ev.card_action(user, card, value))).await;
    assert_eq!(status, 200, "{body}");
    body["toast"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn feishu_card_buttons_resolve_exactly_their_approval_and_stop_cancels() {
    let s = start(Some(KEY)).await;
    let (fs, d) = (&s.fs, &s.d);
    say(&s, "oc_g1", "group", ALICE, "approve deploy prod").await;
    say(&s, "oc_g2", "group", BOB, "approve drop table").await;
    let a = wait_card(fs, "oc_g1", "deploy prod").await;
    let b = wait_card(fs, "oc_g2", "drop table").await;
    assert_eq!(conversations(d).await.len(), 2);

    let toast = press(&s, BOB, &b, &value(&b, "Deny")).await;
    assert!(toast.contains("Denied"), "{toast}");
    assert_eq!(approval_status(d, "drop table").await, "denied");
    assert_eq!(approval_status(d, "deploy prod").await, "pending");
    let updated = fs
        .wait("the card shows the decision", |f| {
            f.shown("oc_g2")
                .into_iter()
                .find(|m| m.message_id == b.message_id && m.text().contains("denied by"))
        })
        .await;
    assert!(updated.text().contains(BOB), "{}", updated.text());
    assert!(updated.buttons().is_empty(), "buttons removed");
    fs.wait_shown("oc_g2", "approval: denied").await;

    // The same button again is stale.
    let toast = press(&s, BOB, &b, &value(&b, "Allow")).await;
    assert!(toast.contains("no longer pending"), "{toast}");
    // A's button pressed in another chat does nothing...
    let foreign = Shown {
        chat_id: "oc_g2".into(),
        ..a.clone()
    };
    let toast = press(&s, BOB, &foreign, &value(&a, "Allow")).await;
    assert!(toast.contains("another chat"), "{toast}");
    assert_eq!(approval_status(d, "deploy prod").await, "pending");
    // ...in its own chat it resolves A.
    let toast = press(&s, ALICE, &a, &value(&a, "Always")).await;
    assert!(toast.contains("Always allowed"), "{toast}");
    fs.wait_shown("oc_g1", "approval: allowed_always").await;

    // /stop cancels the running turn.
    say(&s, "oc_g1", "group", ALICE, "hang").await;
    fs.wait("the hanging turn runs", |f| {
        f.shown("oc_g1")
            .into_iter()
            .rfind(|m| m.text().contains("Working"))
    })
    .await;
    say(&s, "oc_g1", "group", ALICE, "/stop").await;
    fs.wait_shown("oc_g1", "The turn was cancelled").await;
    let sid = {
        let all = conversations(d).await;
        let mut found = None;
        for c in all {
            let full = d
                .get_ok(&format!(
                    "/api/v1/conversations/{}",
                    c["id"].as_str().unwrap()
                ))
                .await;
            if full["title"].as_str().unwrap().contains("oc_g1") {
                found = Some(full["binding"]["session_id"].as_str().unwrap().to_string());
            }
        }
        found.unwrap()
    };
    let turns = d.all_turns(&sid).await;
    assert_eq!(
        turns
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] == "cancelled")
            .count(),
        1
    );
}

#[tokio::test]
async fn feishu_restart_during_an_approval_sends_one_notice_and_the_next_message_resumes() {
    let mut s = start(Some(KEY)).await;
    let chat = "oc_p2p_alice";
    say(&s, chat, "p2p", ALICE, "remember apples").await;
    s.fs.wait_shown(chat, "echo: remember apples").await;
    say(&s, chat, "p2p", ALICE, "approve launch").await;
    let card = wait_card(&s.fs, chat, "launch").await;
    let before = session_in(&s.d, "Feishu").await;

    s.d.restart().await;

    let notice = s.fs.wait_shown(chat, "tether restarted:").await;
    assert!(notice.text().contains("expired"), "{}", notice.text());
    s.fs.wait("the card says expired", |f| {
        f.shown(chat)
            .into_iter()
            .find(|m| m.message_id == card.message_id && m.text().contains("expired"))
    })
    .await;
    say(&s, chat, "p2p", ALICE, "still there?").await;
    let r = s.fs.wait_shown(chat, "echo: still there?").await;
    assert!(r.text().contains("remember apples"), "{}", r.text());
    assert_eq!(session_in(&s.d, "Feishu").await, before);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(delivered(&s.fs, "tether restarted:"), 1);
    assert_eq!(delivered(&s.fs, "echo: remember apples"), 1);
    assert_eq!(delivered(&s.fs, "asks for permission"), 1);
}

#[tokio::test]
async fn feishu_unknown_senders_get_a_pairing_code_and_plain_mode_checks_the_token() {
    // Without an encrypt key: plaintext events, checked by the verification token.
    let s = start(None).await;
    let chat = "oc_p2p_carol";
    let forged = Events::new("not-the-token", None);
    let (status, _) = post(
        &s.d,
        &forged.seal(&forged.message(chat, "p2p", ALICE, "hi", false)),
    )
    .await;
    assert_eq!(status, 401);

    say(&s, chat, "p2p", CAROL, "hello").await;
    let m = s.fs.wait_shown(chat, "pairing code").await;
    let code = m
        .text()
        .split("tether pair approve ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    assert!(
        conversations(&s.d).await.is_empty(),
        "no conversation for a stranger"
    );
    let listed = within(
        "tether pair list",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(s.d.home.path().join("tether.toml"))
            .args(["pair", "list"])
            .env_remove("TETHER_HOME")
            .output(),
    )
    .await
    .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.contains(CAROL) && listed.contains("feishu"),
        "{listed}"
    );
    say(&s, chat, "p2p", CAROL, "still nothing?").await;
    s.fs.wait("a second pairing reply", |f| {
        (f.count_shown(chat, &code) == 2).then_some(())
    })
    .await;
    assert!(conversations(&s.d).await.is_empty());

    let p =
        s.d.post_ok(&format!("/api/v1/pairings/{code}/approve"), json!({}))
            .await;
    assert_eq!(p["user_id"], CAROL);
    s.fs.wait_shown(chat, "You are paired").await;
    say(&s, chat, "p2p", CAROL, "now then").await;
    s.fs.wait_shown(chat, "echo: now then").await;
}

#[tokio::test]
async fn feishu_forged_or_tampered_events_are_rejected_and_duplicates_ignored() {
    let s = start(Some(KEY)).await;
    let chat = "oc_p2p_alice";
    let good =
        s.ev.seal(&s.ev.message(chat, "p2p", ALICE, "forged", false));

    // A wrong signature.
    let mut bad = good.clone();
    bad.headers[2].1 = "0".repeat(64);
    assert_eq!(post(&s.d, &bad).await.0, 401);
    // A tampered body with the original signature.
    let mut tampered = good.clone();
    let mut v: Value = serde_json::from_slice(&tampered.body).unwrap();
    let enc = v["encrypt"].as_str().unwrap().to_string();
    let flipped = format!(
        "{}{}",
        &enc[..20],
        if &enc[20..21] == "A" { "B" } else { "A" }
    );
    v["encrypt"] = json!(format!("{flipped}{}", &enc[21..]));
    tampered.body = v.to_string().into_bytes();
    assert_eq!(post(&s.d, &tampered).await.0, 401);
    // No signature at all.
    let mut unsigned = good.clone();
    unsigned.headers.clear();
    assert_eq!(post(&s.d, &unsigned).await.0, 401);
    // Not encrypted.
    let plain = Events::new(TOKEN, None);
    assert_eq!(
        post(
            &s.d,
            &plain.seal(&plain.message(chat, "p2p", ALICE, "plain", false))
        )
        .await
        .0,
        401
    );
    // Encrypted with another key.
    let other = Events::new(TOKEN, Some("another-key"));
    assert_eq!(
        post(
            &s.d,
            &other.seal(&other.message(chat, "p2p", ALICE, "x", false))
        )
        .await
        .0,
        401
    );
    // Right key, wrong verification token.
    let wrong_token = Events::new("nope", Some(KEY));
    assert_eq!(
        post(
            &s.d,
            &wrong_token.seal(&wrong_token.message(chat, "p2p", ALICE, "x", false))
        )
        .await
        .0,
        401
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(conversations(&s.d).await.is_empty(), "nothing was done");
    assert_eq!(delivered(&s.fs, ""), 0);

    // The genuine event, delivered twice (Feishu retries): handled once.
    assert_eq!(post(&s.d, &good).await.0, 200);
    s.fs.wait_shown(chat, "echo: forged").await;
    assert_eq!(post(&s.d, &good).await.0, 200);
    say(&s, chat, "p2p", ALICE, "marker").await;
    let r = s.fs.wait_shown(chat, "echo: marker").await;
    assert!(r.text().contains("remembers 1"), "{}", r.text());
    assert_eq!(delivered(&s.fs, "echo: forged"), 1);
}

#[tokio::test]
async fn feishu_failed_sends_are_retried_and_delivered_once_also_across_a_restart() {
    let mut s = start(Some(KEY)).await;
    let chat = "oc_p2p_alice";
    s.fs.fail(
        "echo: flaky",
        &[Failure::RateLimited { reset_secs: 1 }, Failure::ServerError],
    );
    say(&s, chat, "p2p", ALICE, "flaky").await;
    s.fs.wait_shown(chat, "echo: flaky").await;
    let attempts: Vec<_> =
        s.fs.calls()
            .into_iter()
            .filter(|c| {
                c.route == "POST /open-apis/im/v1/messages"
                    && c.body["content"].as_str().unwrap().contains("echo: flaky")
            })
            .collect();
    let statuses: Vec<u16> = attempts.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 500, 200]);
    // Not sooner than the platform's reset (1 s), give or take the outbox's clock, which
    // counts whole milliseconds (a retry due at +1000 ms may go at +999.5).
    assert!(
        attempts[1].at.duration_since(attempts[0].at) >= Duration::from_millis(990),
        "retried after {:?}",
        attempts[1].at.duration_since(attempts[0].at)
    );

    s.fs.fail("echo: sturdy", &[Failure::ServerError; 200]);
    say(&s, chat, "p2p", ALICE, "sturdy").await;
    s.fs.wait("two failed attempts", |f| {
        let n = f
            .calls()
            .iter()
            .filter(|c| {
                c.status == 500 && c.body["content"].as_str().unwrap_or("").contains("sturdy")
            })
            .count();
        (n >= 2).then_some(())
    })
    .await;
    s.d.kill9().await;
    s.fs.clear_failures();
    s.d.restart().await;
    s.fs.wait_shown(chat, "echo: sturdy").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(delivered(&s.fs, "echo: sturdy"), 1);
    assert_eq!(s.fs.count_shown(chat, "echo: sturdy"), 1);
    assert_eq!(delivered(&s.fs, "echo: flaky"), 1);
}

#[tokio::test]
async fn feishu_signed_events_with_a_stale_or_future_timestamp_are_refused() {
    let s = start(Some(KEY)).await;
    let chat = "oc_p2p_alice";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A capture replayed later, a clock far ahead: refused, whatever the event id.
    for ts in [now - 6 * 60, now + 6 * 60, now - 86_400] {
        let stale =
            s.ev.seal_at(&s.ev.message(chat, "p2p", ALICE, "replayed", false), ts);
        assert_eq!(post(&s.d, &stale).await.0, 401, "timestamp {ts}");
    }
    // A small skew either way is fine.
    let skewed = s.ev.seal_at(
        &s.ev.message(chat, "p2p", ALICE, "skewed", false),
        now - 120,
    );
    assert_eq!(post(&s.d, &skewed).await.0, 200);
    s.fs.wait_shown(chat, "echo: skewed").await;
    assert_eq!(delivered(&s.fs, "echo: replayed"), 0);
}
