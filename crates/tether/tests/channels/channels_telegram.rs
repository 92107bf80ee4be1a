//! End to end: Telegram against a fake Bot API on loopback, with a real `tether serve`
//! and the fake agent (registered as `codex` too, so `/new codex <task>` works).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::fake_telegram::{
    self, Failure, FakeTelegram, Shown, forum_topic, private_chat,
};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

const ANN: (i64, &str) = (111, "Ann");
const BOB: (i64, &str) = (222, "Bob");
const CAROL: (i64, &str) = (333, "Carol");
const DAVE: (i64, &str) = (444, "Dave");

fn codex_agent(state: &std::path::Path) -> String {
    format!(
        "[agents.codex]\ndriver = \"acp\"\ncommand = {:?}\nargs = [\"--state-dir\", {:?}]\n\n",
        bin_path("fake-agent").display().to_string(),
        state.display().to_string()
    )
}

struct Setup {
    tg: FakeTelegram,
    d: Daemon,
    _state: tempfile::TempDir,
}

async fn start(extra: &str) -> Setup {
    let tg = FakeTelegram::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}",
        codex_agent(state.path()),
        tg.config(&[ANN.0, BOB.0], extra)
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    Setup {
        tg,
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

/// The single conversation whose title contains `needle`.
async fn conversation(d: &Daemon, needle: &str) -> Value {
    let all = conversations(d).await;
    let found: Vec<_> = all
        .iter()
        .filter(|c| c["title"].as_str().unwrap().contains(needle))
        .collect();
    assert_eq!(found.len(), 1, "{all:?}");
    d.get_ok(&format!(
        "/api/v1/conversations/{}",
        found[0]["id"].as_str().unwrap()
    ))
    .await
}

fn session_of(c: &Value) -> String {
    c["binding"]["session_id"].as_str().unwrap().to_string()
}

/// Sent messages whose text contains `needle` (successful sendMessage calls only).
fn delivered(tg: &FakeTelegram, needle: &str) -> usize {
    tg.calls("sendMessage")
        .iter()
        .filter(|c| {
            c.status == 200
                && fake_telegram::plain(c.body["text"].as_str().unwrap()).contains(needle)
        })
        .count()
}

#[tokio::test]
async fn telegram_sessions_follow_ups_new_and_long_results() {
    let Setup { tg, d, .. } = start("").await;
    let chat = private_chat(ANN.0);
    tg.wait("setMyCommands at start", |t| {
        (!t.calls("setMyCommands").is_empty()).then_some(())
    })
    .await;
    let cmds = tg.calls("setMyCommands")[0].body["commands"].clone();
    assert!(
        cmds.as_array()
            .unwrap()
            .iter()
            .any(|c| c["command"] == "new"),
        "{cmds}"
    );

    // `/new codex <task>` starts a codex session and the result arrives.
    tg.say(&chat, ANN, "/new codex hello world");
    let result = tg.wait_shown(ANN.0, "echo: hello world").await;
    assert!(result.text().contains("remembers 0"), "{}", result.text());
    let status = tg.wait_shown(ANN.0, "Done").await;
    assert!(status.edits >= 1, "the status message is edited in place");
    assert_eq!(
        tg.count_shown(ANN.0, "Working on it"),
        0,
        "edited, not repeated"
    );
    let c = conversation(&d, "Telegram").await;
    assert_eq!(c["binding"]["agent"], "codex");
    let first_session = session_of(&c);

    // A follow-up stays in the same session.
    tg.say(&chat, ANN, "second");
    let r = tg.wait_shown(ANN.0, "echo: second").await;
    assert!(r.text().contains("remembers 1"), "{}", r.text());
    let c = conversation(&d, "Telegram").await;
    assert_eq!(session_of(&c), first_session);

    // /status answers with agent, model, session, state, queue.
    tg.say(&chat, ANN, "/status");
    let s = tg.wait_shown(ANN.0, "queue:").await;
    let text = s.text();
    assert!(text.contains("state: bound/idle"), "{text}");
    assert!(
        text.contains(&first_session[..8]) && text.contains("codex"),
        "{text}"
    );

    // Bare /new, then a message: a new session.
    tg.say(&chat, ANN, "/new");
    tg.wait_shown(ANN.0, "the next message starts a new codex session")
        .await;
    tg.say(&chat, ANN, "third");
    let r = tg.wait_shown(ANN.0, "echo: third").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    let c = conversation(&d, "Telegram").await;
    assert_ne!(session_of(&c), first_session);
    let third_session = session_of(&c);

    // Issue 26 item 9: `/new <task>` on a bound conversation replaces the session and runs
    // the task in the new one; `/detach` clears the binding with a status line, and the
    // next message starts a new session.
    tg.say(&chat, ANN, "/new fresh task");
    let r = tg.wait_shown(ANN.0, "echo: fresh task").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    let c = conversation(&d, "Telegram").await;
    let task_session = session_of(&c);
    assert_ne!(task_session, third_session);
    tg.say(&chat, ANN, "/detach");
    tg.wait_shown(ANN.0, "detached").await;
    let c = conversation(&d, "Telegram").await;
    assert!(c["binding"].is_null(), "{c}");
    assert_eq!(c["state"], "unbound", "{c}");
    tg.say(&chat, ANN, "after detach");
    let r = tg.wait_shown(ANN.0, "echo: after detach").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    let c = conversation(&d, "Telegram").await;
    assert_ne!(session_of(&c), task_session);

    // Progress: one status message, edited in place at most once per interval.
    tg.say(&chat, ANN, "stream 20 50");
    let done = tg.wait_shown(ANN.0, "chunk 19").await;
    let status = tg
        .shown(ANN.0)
        .into_iter()
        .rfind(|m| m.message_id < done.message_id)
        .unwrap();
    assert!(status.text().contains("Done"), "{}", status.text());
    let edits: Vec<_> = tg
        .calls("editMessageText")
        .into_iter()
        .filter(|c| c.body["message_id"] == status.message_id)
        .collect();
    assert!(
        edits
            .iter()
            .any(|e| e.body["text"].as_str().unwrap().contains("Working…"))
    );
    // Throttled: far fewer edits than the 20 deltas (the interval itself is unit-tested).
    assert!((2..20).contains(&edits.len()), "{} edits", edits.len());

    // A question is asked on the phone and a plain reply answers it.
    tg.say(&chat, ANN, "ask which branch?");
    tg.wait_shown(ANN.0, "❓ which branch?").await;
    tg.say(&chat, ANN, "main");
    tg.wait_shown(ANN.0, "answer: main").await;

    // A failure arrives with its reason.
    tg.say(&chat, ANN, "fail");
    let f = tg.wait_shown(ANN.0, "The turn failed").await;
    assert!(f.text().contains("fake failure as asked"), "{}", f.text());

    // An unknown command gets the list of commands and no agent work.
    tg.say(&chat, ANN, "/frobnicate");
    tg.wait_shown(ANN.0, "/frobnicate").await;

    // A 10 000-character result arrives split into well-formed parts.
    let mut long = String::new();
    let mut i = 0;
    while long.len() < 10_000 {
        long.push_str(&format!(
            "Paragraph {i}: the quick brown fox jumps over the lazy dog <&> again and again.\n"
        ));
        if i % 7 == 6 {
            long.push('\n');
        }
        if i == 40 {
            long.push_str("```rust\n");
            for j in 0..30 {
                long.push_str(&format!("let x{j} = a < b && c > d; // line {j}\n"));
            }
            long.push_str("```\n\n");
        }
        i += 1;
    }
    tg.say(&chat, ANN, &long);
    let last_line = format!("Paragraph {}:", i - 1);
    tg.wait_shown(ANN.0, &last_line).await;
    let parts: Vec<Shown> = tg
        .shown(ANN.0)
        .into_iter()
        .skip_while(|m| !m.text().contains("echo: Paragraph 0:"))
        .filter(|m| !m.text().contains("Done") && !m.text().contains("Working"))
        .collect();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for p in &parts {
        assert!(p.text().encode_utf16().count() <= 4096, "part too long");
        assert_eq!(
            p.html.matches("<pre").count(),
            p.html.matches("</pre>").count(),
            "{}",
            p.html
        );
        assert!(!p.html.contains("```"), "fences are rendered: {}", p.html);
    }
    let joined: String = parts.iter().map(Shown::text).collect::<Vec<_>>().join("\n");
    for line in long
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("```"))
    {
        assert_eq!(joined.matches(line).count(), 1, "line {line:?} once");
    }
    let code_parts = parts.iter().filter(|p| p.html.contains("let x0 ")).count();
    assert_eq!(code_parts, 1);
    let code = parts.iter().find(|p| p.html.contains("let x0 ")).unwrap();
    assert!(
        code.html.contains("let x29 "),
        "the code block is kept whole"
    );

    // Archived on the web page: the chat goes on in a new conversation.
    let old = conversation(&d, "Telegram").await;
    let old_id = old["id"].as_str().unwrap().to_string();
    let resp = within(
        "archive",
        d.client
            .patch(d.url(&format!("/api/v1/conversations/{old_id}")))
            .bearer_auth(&d.token)
            .json(&json!({"archived": true}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    tg.say(&chat, ANN, "after the archive");
    let r = tg.wait_shown(ANN.0, "echo: after the archive").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    let now = conversation(&d, "Telegram").await;
    assert_ne!(now["id"], old_id.as_str());
}

async fn wait_buttons(tg: &FakeTelegram, chat: i64, thread: i64, title: &str) -> Shown {
    tg.wait(&format!("approval {title:?} with buttons"), |t| {
        t.shown(chat).into_iter().find(|m| {
            m.thread_id == Some(thread) && m.text().contains(title) && m.buttons.len() == 3
        })
    })
    .await
}

fn button<'a>(m: &'a Shown, label: &str) -> &'a str {
    &m.buttons.iter().find(|b| b.0 == label).unwrap().1
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

async fn callback_answer(tg: &FakeTelegram, id: i64) -> String {
    let cb = format!("cb{id}");
    tg.wait("the callback query is answered", |t| {
        t.calls("answerCallbackQuery")
            .into_iter()
            .rev()
            .find(|c| c.body["callback_query_id"] == cb.as_str())
            .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
    })
    .await
}

#[tokio::test]
async fn telegram_buttons_resolve_exactly_their_approval_and_stop_cancels() {
    let Setup { tg, d, .. } = start("").await;
    // Two forum topics of one group: two conversations, one approval pending in each.
    let group = -100_500;
    let topic_a = forum_topic(group, "Team", 7);
    let topic_b = forum_topic(group, "Team", 8);
    tg.say(&topic_a, ANN, "approve deploy prod");
    tg.say(&topic_b, BOB, "approve drop table");
    let a = wait_buttons(&tg, group, 7, "deploy prod").await;
    let b = wait_buttons(&tg, group, 8, "drop table").await;
    assert_eq!(conversations(&d).await.len(), 2);
    let labels: Vec<&str> = b.buttons.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(labels, ["Allow", "Always", "Deny"]);
    assert!(b.buttons.iter().all(|x| x.1.len() <= 64));

    // /status lists the pending approval's id.
    tg.say(&topic_b, BOB, "/status");
    let s = tg
        .wait("status in topic 8", |t| {
            t.shown(group)
                .into_iter()
                .find(|m| m.thread_id == Some(8) && m.text().contains("pending approval"))
        })
        .await;
    let b_id = button(&b, "Deny").split(':').nth(1).unwrap().to_string();
    assert!(s.text().contains(&b_id[..8]), "{}", s.text());

    // Deny B by its button: B is denied, A stays pending.
    tg.press(BOB, &b, button(&b, "Deny"));
    let answer = callback_answer(&tg, b.message_id).await;
    assert!(answer.contains("Denied"), "{answer}");
    assert_eq!(approval_status(&d, "drop table").await, "denied");
    assert_eq!(approval_status(&d, "deploy prod").await, "pending");
    let edited = tg
        .wait("the approval message shows the decision", |t| {
            t.shown(group)
                .into_iter()
                .find(|m| m.message_id == b.message_id && m.text().contains("denied by"))
        })
        .await;
    assert!(edited.text().contains("Bob"), "{}", edited.text());
    assert!(edited.buttons.is_empty(), "buttons removed");
    tg.wait_shown(group, "approval: denied").await;

    // The same button again: no longer pending.
    let b2 = Shown {
        message_id: b.message_id,
        ..b.clone()
    };
    tg.press(BOB, &b2, button(&b, "Allow"));
    // A second press on the same message gets the same callback id prefix: take the newest.
    let answer = within("stale answer", async {
        loop {
            let answers: Vec<String> = tg
                .calls("answerCallbackQuery")
                .iter()
                .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
                .collect();
            if answers.len() >= 2 {
                return answers[1].clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(answer.contains("no longer pending"), "{answer}");
    assert_eq!(approval_status(&d, "drop table").await, "denied");

    // A's button from another topic's chat cannot answer it (it belongs elsewhere)...
    let foreign = Shown {
        thread_id: Some(8),
        ..a.clone()
    };
    tg.press(BOB, &foreign, button(&a, "Allow"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(approval_status(&d, "deploy prod").await, "pending");
    // ...its own does.
    tg.press(ANN, &a, button(&a, "Always"));
    tg.wait_shown(group, "approval: allowed_always").await;
    assert_eq!(approval_status(&d, "deploy prod").await, "allowed_always");

    // /stop cancels the running turn.
    tg.say(&topic_a, ANN, "hang");
    tg.wait("the hanging turn runs", |t| {
        t.shown(group)
            .into_iter()
            .rfind(|m| m.thread_id == Some(7) && m.text().contains("Working"))
    })
    .await;
    tg.say(&topic_a, ANN, "/stop");
    tg.wait_shown(group, "The turn was cancelled").await;
    let mut turns_cancelled = 0;
    for c in conversations(&d).await {
        let full = d
            .get_ok(&format!(
                "/api/v1/conversations/{}",
                c["id"].as_str().unwrap()
            ))
            .await;
        let sid = session_of(&full);
        let turns = d.all_turns(&sid).await;
        turns_cancelled += turns
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] == "cancelled")
            .count();
    }
    assert_eq!(turns_cancelled, 1);
}

#[tokio::test]
async fn telegram_restart_during_an_approval_sends_one_notice_and_the_next_message_resumes() {
    let Setup { tg, mut d, .. } = start("").await;
    let chat = private_chat(ANN.0);
    tg.say(&chat, ANN, "remember apples");
    tg.wait_shown(ANN.0, "echo: remember apples").await;
    tg.say(&chat, ANN, "approve launch");
    let a = tg
        .wait("approval with buttons", |t| {
            t.shown(ANN.0)
                .into_iter()
                .find(|m| m.text().contains("launch") && !m.buttons.is_empty())
        })
        .await;
    let before = session_of(&conversation(&d, "Telegram").await);

    d.restart().await;

    tg.wait_shown(ANN.0, "tether restarted:").await;
    let notice = tg
        .shown(ANN.0)
        .into_iter()
        .find(|m| m.text().contains("tether restarted:"))
        .unwrap();
    assert!(notice.text().contains("expired"), "{}", notice.text());
    let expired = tg
        .wait("the approval message says expired", |t| {
            t.shown(ANN.0)
                .into_iter()
                .find(|m| m.message_id == a.message_id && m.text().contains("expired"))
        })
        .await;
    assert!(expired.buttons.is_empty());

    tg.say(&chat, ANN, "still there?");
    let r = tg.wait_shown(ANN.0, "echo: still there?").await;
    assert!(r.text().contains("remember apples"), "{}", r.text());
    assert_eq!(session_of(&conversation(&d, "Telegram").await), before);
    // Exactly one notice, and no message was sent twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(delivered(&tg, "tether restarted:"), 1);
    assert_eq!(delivered(&tg, "echo: remember apples"), 1);
    assert_eq!(delivered(&tg, "asks for permission"), 1);
}

#[tokio::test]
async fn telegram_unknown_senders_get_a_pairing_code_and_cause_no_work_until_approved() {
    let Setup { tg, d, .. } = start("").await;
    tg.say(&private_chat(CAROL.0), CAROL, "hello");
    let m = tg.wait_shown(CAROL.0, "pairing code").await;
    let code = m
        .text()
        .split("tether pair approve ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(code.len(), 8, "{}", m.text());
    // A second message gets the same code; no conversation, no session.
    tg.say(&private_chat(CAROL.0), CAROL, "hello?");
    tg.wait("second pairing reply", |t| {
        (t.count_shown(CAROL.0, &code) == 2).then_some(())
    })
    .await;
    assert!(conversations(&d).await.is_empty());
    let pending = d.get_ok("/api/v1/pairings").await;
    assert_eq!(pending[0]["code"], code.as_str());
    assert_eq!(pending[0]["user_id"], "333");

    // The operator approves on the command line.
    let out = within(
        "tether pair approve",
        tokio::process::Command::new(bin_path("tether"))
            .arg("--config")
            .arg(d.home.path().join("tether.toml"))
            .args(["pair", "approve", &code.to_lowercase()])
            .env_remove("TETHER_HOME")
            .output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    tg.wait_shown(CAROL.0, "You are paired").await;
    tg.say(&private_chat(CAROL.0), CAROL, "now then");
    tg.wait_shown(CAROL.0, "echo: now then").await;
    assert_eq!(conversations(&d).await.len(), 1);

    // And through the API, which needs the token.
    tg.say(&private_chat(DAVE.0), DAVE, "hi");
    let m = tg.wait_shown(DAVE.0, "pairing code").await;
    let code = m
        .text()
        .split("tether pair approve ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    let url = d.url(&format!("/api/v1/pairings/{code}/approve"));
    let anon = within("anonymous approve", d.client.post(&url).send())
        .await
        .unwrap();
    assert_eq!(anon.status().as_u16(), 401);
    let p = d
        .post_ok(&format!("/api/v1/pairings/{code}/approve"), json!({}))
        .await;
    assert_eq!(p["status"], "approved");
    let (status, body) = d
        .post(&format!("/api/v1/pairings/{code}/approve"), json!({}))
        .await;
    assert_eq!(status, 400, "{body}");
    tg.wait_shown(DAVE.0, "You are paired").await;
}

#[tokio::test]
async fn telegram_webhook_checks_the_secret_and_ignores_duplicate_updates() {
    let Setup { tg, d, .. } =
        start("mode = \"webhook\"\nwebhook_secret = \"s3cret-token\"\nwebhook_url = \"https://bot.example.org/hooks/telegram\"\n").await;
    let hook = d.url("/hooks/telegram");
    let update = tg.text_update(&private_chat(ANN.0), ANN, "via webhook");
    let post = |secret: Option<&str>, body: &Value| {
        let mut req = d.client.post(&hook).json(body);
        if let Some(s) = secret {
            req = req.header("X-Telegram-Bot-Api-Secret-Token", s);
        }
        within("webhook POST", req.send())
    };
    // Forged: no header, wrong header → 401 and nothing done.
    assert_eq!(post(None, &update).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        post(Some("guess"), &update)
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(conversations(&d).await.is_empty());
    assert!(tg.calls("sendMessage").is_empty());

    assert_eq!(
        post(Some("s3cret-token"), &update)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    tg.wait_shown(ANN.0, "echo: via webhook").await;
    // Telegram retries: the same update again is acknowledged and ignored.
    assert_eq!(
        post(Some("s3cret-token"), &update)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let marker = tg.text_update(&private_chat(ANN.0), ANN, "marker");
    assert_eq!(
        post(Some("s3cret-token"), &marker)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let r = tg.wait_shown(ANN.0, "echo: marker").await;
    assert!(
        r.text().contains("remembers 1"),
        "one earlier message only: {}",
        r.text()
    );
    assert_eq!(delivered(&tg, "echo: via webhook"), 1);
    assert!(
        tg.calls("getUpdates").is_empty(),
        "no polling in webhook mode"
    );
    let hooks = tg.calls("setWebhook");
    assert_eq!(hooks.len(), 1);
    assert_eq!(
        hooks[0].body["url"],
        "https://bot.example.org/hooks/telegram"
    );
    assert_eq!(hooks[0].body["secret_token"], "s3cret-token");
}

#[tokio::test]
async fn telegram_failed_sends_are_retried_and_delivered_once_also_across_a_restart() {
    let Setup { tg, mut d, .. } = start("").await;
    let chat = private_chat(ANN.0);
    tg.fail(
        "sendMessage",
        "echo: flaky",
        &[
            Failure::TooManyRequests { retry_after: 1 },
            Failure::ServerError,
        ],
    );
    tg.say(&chat, ANN, "flaky");
    tg.wait_shown(ANN.0, "echo: flaky").await;
    let attempts: Vec<_> = tg
        .calls("sendMessage")
        .into_iter()
        .filter(|c| fake_telegram::plain(c.body["text"].as_str().unwrap()).contains("echo: flaky"))
        .collect();
    let statuses: Vec<u16> = attempts.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 500, 200]);
    let waited = attempts[1].at.duration_since(attempts[0].at);
    // Give or take the outbox's clock, which counts whole milliseconds.
    assert!(
        waited >= Duration::from_millis(990),
        "retry_after honoured: {waited:?}"
    );

    // Failing while the daemon dies: delivered once after the restart.
    tg.fail("sendMessage", "echo: sturdy", &[Failure::ServerError; 200]);
    tg.say(&chat, ANN, "sturdy");
    tg.wait("two failed attempts", |t| {
        let n = t
            .calls("sendMessage")
            .iter()
            .filter(|c| {
                c.status == 500
                    && fake_telegram::plain(c.body["text"].as_str().unwrap()).contains("sturdy")
            })
            .count();
        (n >= 2).then_some(())
    })
    .await;
    d.kill9().await;
    tg.clear_failures();
    d.restart().await;
    tg.wait_shown(ANN.0, "echo: sturdy").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(delivered(&tg, "echo: sturdy"), 1);
    assert_eq!(delivered(&tg, "echo: flaky"), 1);
    assert_eq!(tg.count_shown(ANN.0, "echo: sturdy"), 1);
}

/// `SELECT COUNT(*) ...` on the daemon's database (read-only, beside the running daemon).
async fn count(d: &Daemon, sql: &str) -> i64 {
    use sqlx::{ConnectOptions, Row};
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(d.db_path())
        .read_only(true)
        .connect()
        .await
        .unwrap();
    sqlx::query(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get::<i64, _>(0)
}

#[tokio::test]
async fn telegram_a_flood_of_unknown_senders_leaves_bounded_rows() {
    let Setup { tg, d, .. } = start("").await;
    const SENDERS: i64 = 80;
    // The cap of pending pairing codes per channel (tether_channels::pairing::MAX_PENDING).
    const CAP: i64 = 64;
    for i in 0..SENDERS {
        let user = (10_000 + i, "Stranger");
        tg.say(&private_chat(user.0), user, "let me in");
    }
    within("every update handled", async {
        loop {
            let seen = count(
                &d,
                "SELECT COUNT(*) FROM inbound_dedupe WHERE source = 'telegram'",
            )
            .await;
            let unhandled =
                count(&d, "SELECT COUNT(*) FROM channel_inbound WHERE handled = 0").await;
            if seen == SENDERS && unhandled == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(
        count(&d, "SELECT COUNT(*) FROM channel_pairings").await,
        CAP
    );
    assert!(count(&d, "SELECT COUNT(*) FROM channel_outbox").await <= CAP);
    assert_eq!(count(&d, "SELECT COUNT(*) FROM channel_inbound").await, 0);
    assert_eq!(count(&d, "SELECT COUNT(*) FROM channel_chats").await, 0);
    assert_eq!(count(&d, "SELECT COUNT(*) FROM conversations").await, 0);
    let pending = d.get_ok("/api/v1/pairings").await;
    assert_eq!(pending.as_array().unwrap().len() as i64, CAP);

    // Known users are still served.
    tg.say(&private_chat(ANN.0), ANN, "/new codex still here");
    tg.wait_shown(ANN.0, "echo: still here").await;
}

/// Issue 24 S4: with `group_mode = "user"` each member of a group has a conversation of
/// their own; another member pressing a member's approval button is refused, and the
/// member's own press decides it.
#[tokio::test]
async fn in_user_mode_a_member_cannot_answer_another_members_approval() {
    let Setup { tg, d, .. } = start("group_mode = \"user\"\n").await;
    let group = -100_600;
    let topic = forum_topic(group, "Team", 9);
    tg.say(&topic, ANN, "approve deploy prod");
    let a = wait_buttons(&tg, group, 9, "deploy prod").await;

    tg.press(BOB, &a, button(&a, "Allow"));
    let answer = callback_answer(&tg, a.message_id).await;
    assert!(answer.contains("another member's conversation"), "{answer}");
    assert_eq!(approval_status(&d, "deploy prod").await, "pending");

    tg.press(ANN, &a, button(&a, "Allow"));
    tg.wait_shown(group, "approval: allowed").await;
    assert_eq!(approval_status(&d, "deploy prod").await, "allowed");
}
