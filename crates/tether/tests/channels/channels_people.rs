//! One person across channels (issue 28), end to end against fake Slack and Telegram:
//! accounts linked with one-time codes both ways round (`/link` on the channel, the code
//! entered on the page; a code from the page sent as `/link <code>`), a linked account
//! acting as its person, `/here` carrying one conversation and its agent session from
//! Slack to Telegram and on to the page, replies going to the chat of the latest message;
//! and what must be refused: a code used twice, wrong codes (counted), an account linked
//! twice, `/here` into someone else's private conversation, a viewer posting, an unlinked
//! account falling back to a stranger.

use serde_json::{Value, json};
use tether_testkit::fake_slack::FakeSlack;
use tether_testkit::fake_telegram::{FakeTelegram, private_chat};
use tether_testkit::people::{Who, person};
use tether_testkit::{Daemon, DaemonOptions, bin_path};

const ANN_TG: (i64, &str) = (111, "Ann");
const EVE_TG: (i64, &str) = (666, "Eve");
const VAL_TG: (i64, &str) = (777, "Val");
const ANN_SLACK: &str = "UANN";

struct Setup {
    tg: FakeTelegram,
    sl: FakeSlack,
    d: Daemon,
    _state: tempfile::TempDir,
}

/// Telegram (nobody allowed) and Slack (Ann's account allowed) beside each other.
async fn start() -> Setup {
    let tg = FakeTelegram::start().await;
    let sl = FakeSlack::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "[agents.codex]\ndriver = \"acp\"\ncommand = {:?}\nargs = [\"--state-dir\", {:?}]\n\n{}{}",
        bin_path("fake-agent").display().to_string(),
        state.path().display().to_string(),
        tg.config(&[], ""),
        sl.section("socket", &[ANN_SLACK], "")
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    sl.wait_connections(1).await;
    Setup {
        tg,
        sl,
        d,
        _state: state,
    }
}

fn owner(d: &Daemon) -> Who<'_> {
    Who {
        d,
        token: d.token.clone(),
    }
}

fn str(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// What follows "is " in a channel's `/link` answer: the code.
fn code_in(text: &str) -> String {
    text.split("link code is ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no code in {text:?}"))
        .to_owned()
}

/// A Slack DM from `user` with a fresh timestamp.
fn slack_dm(sl: &FakeSlack, user: &str, text: &str, n: u32) {
    sl.push(
        "events_api",
        sl.message("DANN", user, text, &format!("500.{n:06}"), None),
    );
}

/// A code from the page for `who`, sent on Telegram as `/link <code>` from `from`.
async fn link_telegram(s: &Setup, who: &Who<'_>, from: (i64, &str)) -> String {
    let (status, c) = who.post("/api/v1/me/link-codes", json!({})).await;
    assert_eq!(status, 201, "{c}");
    assert!(str(&c["send"]).starts_with("/link "), "{c}");
    s.tg.say(&private_chat(from.0), from, str(&c["send"]));
    str(&c["code"]).to_owned()
}

#[tokio::test]
async fn a_person_links_slack_and_telegram_and_carries_one_session_from_slack_to_telegram_to_the_page()
 {
    let s = start().await;
    let (tg, sl, d) = (&s.tg, &s.sl, &s.d);
    let owner = owner(d);
    let (ann_id, ann) = person(&owner, "Ann", "member").await;

    // Slack → page: `/link` on Slack gives a code; Ann enters it signed in as herself.
    slack_dm(sl, ANN_SLACK, "/link", 1);
    let m = sl.wait_shown("DANN", "link code is").await;
    let code = code_in(&m.text());
    let (status, a) = ann
        .post("/api/v1/me/accounts", json!({ "code": code }))
        .await;
    assert_eq!(status, 201, "{a}");
    assert_eq!(a["channel"], "slack");
    assert_eq!(a["user_id"], ANN_SLACK);
    assert_eq!(a["person_id"], ann_id.as_str());
    let (status, again) = ann
        .post("/api/v1/me/accounts", json!({ "code": code }))
        .await;
    assert_eq!(status, 404, "a code is taken once: {again}");

    // Page → Telegram: a code from the page, sent from Ann's Telegram account (a stranger
    // until now: no pairing needed).
    link_telegram(&s, &ann, ANN_TG).await;
    let m = tg.wait_shown(ANN_TG.0, "Linked").await;
    assert!(m.text().contains("acts as Ann"), "{}", m.text());
    let (_, mine) = ann.get("/api/v1/me/accounts").await;
    let channels: Vec<&str> = mine["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| str(&a["channel"]))
        .collect();
    assert_eq!(channels, ["slack", "telegram"], "{mine}");

    // Slack: a conversation that is Ann's.
    slack_dm(sl, ANN_SLACK, "hello", 2);
    let r = sl.wait_shown("DANN", "echo: hello").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    let (_, list) = ann.get("/api/v1/conversations").await;
    let conv = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| str(&c["title"]).starts_with("Slack"))
        .unwrap_or_else(|| panic!("Ann sees her Slack conversation: {list}"))
        .clone();
    assert_eq!(conv["owner_id"], ann_id.as_str(), "{conv}");
    let id = str(&conv["id"]).to_owned();

    // Telegram: `/here` carries it over; the same session answers, on Telegram only.
    tg.say(&private_chat(ANN_TG.0), ANN_TG, &format!("/here {id}"));
    tg.wait_shown(ANN_TG.0, "Here:").await;
    tg.say(&private_chat(ANN_TG.0), ANN_TG, "again");
    let r = tg.wait_shown(ANN_TG.0, "echo: again").await;
    assert!(
        r.text().contains(r#"remembers 1: ["hello"]"#),
        "the Slack session goes on: {}",
        r.text()
    );

    // The page: the reply shows there and in Telegram, where the latest message came
    // from; Slack stays quiet.
    let turn = ann.say_and_wait(&id, "third").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let r = tg.wait_shown(ANN_TG.0, "echo: third").await;
    assert!(r.text().contains("remembers 2"), "{}", r.text());
    assert_eq!(sl.count_shown("DANN", "echo: again"), 0, "Slack is muted");
    assert_eq!(sl.count_shown("DANN", "echo: third"), 0, "Slack is muted");
    let (_, history) = ann
        .get(&format!("/api/v1/conversations/{id}/messages"))
        .await;
    let mine: Vec<&Value> = history
        .as_array()
        .unwrap_or_else(|| panic!("{history}"))
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    let said: Vec<&str> = mine.iter().map(|m| str(&m["text"])).collect();
    assert_eq!(said, ["hello", "again", "third"], "{history}");
    assert!(
        mine.iter()
            .all(|m| m["session_id"] == mine[0]["session_id"]),
        "one session throughout: {history}"
    );

    // Back on Slack: replies follow the latest message again.
    slack_dm(sl, ANN_SLACK, "fourth", 3);
    sl.wait_shown("DANN", "echo: fourth").await;
    let (_, chats) = ann.get(&format!("/api/v1/conversations/{id}/chats")).await;
    let replies: Vec<&str> = chats["chats"]
        .as_array()
        .unwrap_or_else(|| panic!("{chats}"))
        .iter()
        .filter(|c| c["replies"] == true)
        .map(|c| str(&c["channel"]))
        .collect();
    assert_eq!(replies, ["slack"], "{chats}");

    // The audit log has both links.
    let (_, audit) = owner.get("/api/v1/audit").await;
    let links = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "account_linked")
        .count();
    assert_eq!(links, 2, "{audit}");
}

#[tokio::test]
async fn link_codes_are_single_use_wrong_ones_are_counted_and_an_account_links_once() {
    let s = start().await;
    let (tg, d) = (&s.tg, &s.d);
    let owner = owner(d);
    let (_, ann) = person(&owner, "Ann", "member").await;
    let (bob_id, bob) = person(&owner, "Bob", "member").await;
    let (_, val) = person(&owner, "Val", "viewer").await;

    // One code, two senders: the second gets nothing, and stays a stranger.
    let code = link_telegram(&s, &ann, ANN_TG).await;
    tg.wait_shown(ANN_TG.0, "Linked").await;
    tg.say(&private_chat(EVE_TG.0), EVE_TG, &format!("/link {code}"));
    tg.wait_shown(EVE_TG.0, "unknown, used or expired").await;
    tg.say(&private_chat(EVE_TG.0), EVE_TG, "hello?");
    tg.wait_shown(EVE_TG.0, "pairing code").await;

    // An account is one person's: linking it again is a conflict.
    let (status, e) = owner
        .post(
            &format!("/api/v1/people/{bob_id}/accounts"),
            json!({ "channel": "telegram", "user_id": ANN_TG.0.to_string() }),
        )
        .await;
    assert_eq!(status, 409, "{e}");
    let (status, _) = ann
        .post(
            &format!("/api/v1/people/{bob_id}/accounts"),
            json!({ "channel": "telegram", "user_id": "999" }),
        )
        .await;
    assert_eq!(status, 403, "members do not link others");

    // Wrong codes on the channel: five, then the account waits.
    for _ in 0..5 {
        tg.say(&private_chat(EVE_TG.0), EVE_TG, "/link ZZZZ-ZZZZ");
    }
    tg.say(&private_chat(EVE_TG.0), EVE_TG, "/link ZZZZ-ZZZY");
    tg.wait_shown(EVE_TG.0, "Too many wrong link codes").await;

    // `/here` into Bob's private conversation: as if it did not exist.
    let (_, bobs) = bob
        .post("/api/v1/conversations", json!({ "title": "Bob's" }))
        .await;
    let bobs = str(&bobs["id"]).to_owned();
    tg.say(&private_chat(ANN_TG.0), ANN_TG, &format!("/here {bobs}"));
    tg.wait_shown(ANN_TG.0, "No such conversation").await;

    // A viewer's linked account may not post.
    link_telegram(&s, &val, VAL_TG).await;
    tg.wait_shown(VAL_TG.0, "Linked").await;
    tg.say(&private_chat(VAL_TG.0), VAL_TG, "let me in");
    let m = tg.wait_shown(VAL_TG.0, "⚠️").await;
    assert!(m.text().contains("role"), "{}", m.text());

    // Unlinked, Ann's account is a stranger again.
    let (status, _) = ann
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/me/accounts/telegram/{}", ANN_TG.0),
            None,
        )
        .await;
    assert_eq!(status, 204);
    tg.say(&private_chat(ANN_TG.0), ANN_TG, "still me");
    tg.wait_shown(ANN_TG.0, "pairing code").await;

    // Wrong codes on the page count toward the address's guessing limit (20 a minute).
    let mut statuses = Vec::new();
    for _ in 0..21 {
        let (status, _) = ann
            .post("/api/v1/me/accounts", json!({ "code": "ZZZZ-ZZZZ" }))
            .await;
        statuses.push(status);
    }
    assert!(statuses[..20].iter().all(|s| *s == 404), "{statuses:?}");
    assert_eq!(statuses[20], 429, "{statuses:?}");
}

#[tokio::test]
async fn a_pairing_approval_links_the_account_to_the_person_chosen() {
    let s = start().await;
    let (tg, d) = (&s.tg, &s.d);
    let owner = owner(d);
    let (bob_id, bob) = person(&owner, "Bob", "member").await;
    tg.say(&private_chat(EVE_TG.0), EVE_TG, "hello");
    let m = tg.wait_shown(EVE_TG.0, "tether pair approve").await;
    let code = m
        .text()
        .split("tether pair approve ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let (status, p) = owner
        .post(
            &format!("/api/v1/pairings/{code}/approve"),
            json!({ "person_id": bob_id }),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    tg.wait_shown(EVE_TG.0, "paired as Bob").await;
    let (_, mine) = bob.get("/api/v1/me/accounts").await;
    assert_eq!(
        mine["accounts"][0]["user_id"],
        EVE_TG.0.to_string(),
        "{mine}"
    );
    tg.say(&private_chat(EVE_TG.0), EVE_TG, "now then");
    tg.wait_shown(EVE_TG.0, "echo: now then").await;
    let (_, list) = bob.get("/api/v1/conversations").await;
    assert_eq!(list[0]["owner_id"], bob_id.as_str(), "Bob's own: {list}");
}
