//! End to end: Feishu's long connection (no webhook configured, so no public URL). A fake
//! Feishu on loopback hands out the socket and pushes events as protobuf frames to a real
//! `tether serve` with the fake agent; tether answers each on the socket and replies
//! through the fake Open API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tether_testkit::fake_feishu::{Events, FakeFeishu, SERVICE_ID, Shown};
use tether_testkit::{Daemon, DaemonOptions, bin_path, within};

const ALICE: &str = "ou_alice";
const EVE: &str = "ou_eve";

struct Setup {
    fs: FakeFeishu,
    ev: Events,
    d: Daemon,
    _state: tempfile::TempDir,
}

/// A daemon on the long connection; `prepare` tunes the fake before tether connects.
async fn start_with(extra: &str, prepare: impl FnOnce(&FakeFeishu)) -> Setup {
    let fs = FakeFeishu::start().await;
    prepare(&fs);
    // Events carry a token as Feishu's do; tether is not given one here (none is needed).
    let ev = Events::new("token-not-configured", None);
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "[agents.codex]\ndriver = \"acp\"\ncommand = {:?}\nargs = [\"--state-dir\", {:?}]\n\n{}",
        bin_path("fake-agent").display().to_string(),
        state.path().display().to_string(),
        fs.long_connection_config(&[ALICE], extra)
    );
    let d = Daemon::start(DaemonOptions {
        extra_config: config,
        ..Default::default()
    })
    .await;
    fs.wait_ws_connections(1).await;
    Setup {
        fs,
        ev,
        d,
        _state: state,
    }
}

async fn start() -> Setup {
    start_with("", |_| {}).await
}

/// Pushes a text message and waits for tether's answer on the socket.
async fn say(s: &Setup, chat: &str, user: &str, text: &str) -> String {
    let id = s.fs.push_ws(&s.ev.message(chat, "p2p", user, text, false));
    let a = s.fs.wait_ws_answer(&id).await;
    assert_eq!(a.code, 200, "{a:?}");
    id
}

#[tokio::test]
async fn without_a_webhook_feishu_events_come_over_the_long_connection() {
    let s = start().await;
    let (fs, d) = (&s.fs, &s.d);
    // No webhook route in this mode.
    let resp = within(
        "POST /hooks/feishu",
        d.client.post(d.url("/hooks/feishu")).body("{}").send(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status().as_u16(), 404);

    let chat = "oc_p2p_alice";
    let id = say(&s, chat, ALICE, "/new codex hello over the socket").await;
    let a = fs.ws_answers(&id).remove(0);
    assert!(
        a.biz_rt_ms.unwrap() < 3000,
        "answered within Feishu's 3 s: {a:?}"
    );
    let r = fs.wait_shown(chat, "echo: hello over the socket").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    say(&s, chat, ALICE, "again").await;
    let r = fs.wait_shown(chat, "echo: again").await;
    assert!(
        r.text().contains("remembers 1"),
        "the same session: {}",
        r.text()
    );

    // Pings name the service the endpoint URL gave.
    fs.wait("a ping", |f| (!f.ws_pings().is_empty()).then_some(()))
        .await;
    assert!(fs.ws_pings().iter().all(|s| *s == SERVICE_ID));
    assert_eq!(fs.ws_connections(), 1);

    // An unknown sender gets a pairing code, as on every channel.
    say(&s, "oc_p2p_eve", EVE, "let me in").await;
    fs.wait_shown("oc_p2p_eve", "tether pair").await;
}

async fn wait_card(fs: &FakeFeishu, chat: &str, title: &str) -> Shown {
    fs.wait(&format!("a card for {title:?}"), |f| {
        f.shown(chat).into_iter().find(|m| {
            m.msg_type == "interactive" && m.text().contains(title) && m.buttons().len() == 3
        })
    })
    .await
}

#[tokio::test]
async fn card_buttons_over_the_long_connection_resolve_their_approval_with_a_toast() {
    let s = start().await;
    let (fs, d) = (&s.fs, &s.d);
    let chat = "oc_p2p_alice";
    say(&s, chat, ALICE, "approve ship it").await;
    let card = wait_card(fs, chat, "ship it").await;
    let allow = card
        .buttons()
        .into_iter()
        .find(|b| b.0 == "Allow")
        .unwrap()
        .1;
    let id = fs.push_ws_parts("event", &s.ev.card_action(ALICE, &card, &allow), 1, &[]);
    let a = fs.wait_ws_answer(&id).await;
    assert_eq!(a.code, 200);
    let toast = a.data.unwrap()["toast"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(toast.contains("Allowed"), "{toast}");
    let list = d.get_ok("/api/v1/approvals").await;
    let ap = list
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == "ship it")
        .unwrap();
    assert_eq!(ap["status"], "allowed");
    fs.wait("the card shows the decision", |f| {
        f.shown(chat)
            .into_iter()
            .find(|m| m.message_id == card.message_id && m.text().contains("allowed by"))
    })
    .await;

    // The same press again (Feishu repeats what it thinks unanswered): answered, no effect.
    let again = fs.push_ws_parts("event", &s.ev.card_action(ALICE, &card, &allow), 1, &[]);
    assert_eq!(fs.wait_ws_answer(&again).await.code, 200);
}

#[tokio::test]
async fn an_event_in_parts_is_put_back_together_in_any_order() {
    let s = start().await;
    let (fs, _) = (&s.fs, &s.d);
    let chat = "oc_p2p_alice";
    let text = format!("/new codex {}", "long words ".repeat(300));
    let payload = s.ev.message(chat, "p2p", ALICE, &text, false);
    let id = fs.push_ws_parts("event", &payload, 3, &[2, 0, 1]);
    assert_eq!(fs.wait_ws_answer(&id).await.code, 200);
    let r = fs.wait_shown(chat, "echo: long words").await;
    assert!(r.text().contains("remembers 0"), "{}", r.text());
    assert_eq!(
        fs.ws_answers(&id).len(),
        1,
        "one answer for the whole message"
    );
}

#[tokio::test]
async fn a_dropped_connection_comes_back_and_loses_or_doubles_nothing() {
    let s = start_with("", |f| f.set_ws_settings(120, 1, 0)).await;
    let fs = &s.fs;
    let chat = "oc_p2p_alice";
    say(&s, chat, ALICE, "/new codex first").await;
    fs.wait_shown(chat, "echo: first").await;

    // tether handles the next message, but its answer is lost with the connection: Feishu
    // delivers it again on the new one; tether must not run it twice.
    fs.lose_ws_answers(1);
    let second = fs.push_ws(&s.ev.message(chat, "p2p", ALICE, "second", false));
    fs.wait_shown(chat, "echo: second").await;
    fs.drop_ws();
    // Sent while tether is away: delivered on the next connection.
    let third = fs.push_ws(&s.ev.message(chat, "p2p", ALICE, "third", false));
    fs.wait_ws_connections(2).await;
    assert_eq!(fs.wait_ws_answer(&second).await.code, 200);
    assert_eq!(fs.wait_ws_answer(&third).await.code, 200);
    let r = fs.wait_shown(chat, "echo: third").await;
    assert!(r.text().contains("remembers 2"), "{}", r.text());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fs.count_shown(chat, "echo: second"), 1, "handled once");
    assert_eq!(fs.count_shown(chat, "echo: third"), 1);
    assert_eq!(fs.ws_unanswered(), 0);
}

#[tokio::test]
async fn a_busy_endpoint_is_asked_again_and_pongs_retune_the_pings() {
    let s = start_with("", |f| {
        f.fail_ws_endpoint(&[1, 1]);
        // One-second pings: more than one arrives within a few seconds.
        f.set_ws_settings(1, 1, 0);
    })
    .await;
    let fs = &s.fs;
    assert!(fs.ws_endpoint_calls() >= 3, "two refusals, then the socket");
    fs.wait("three pings", |f| (f.ws_pings().len() >= 3).then_some(()))
        .await;
    assert_eq!(fs.ws_connections(), 1);
}

#[tokio::test]
async fn malformed_frames_are_ignored_and_the_connection_stays() {
    let s = start().await;
    let fs = &s.fs;
    let chat = "oc_p2p_alice";
    // Not protobuf at all; a part numbered past its sum; a part without its message id;
    // a payload that is not JSON; an event type tether does not know; an encrypted event
    // although no key is configured.
    fs.push_ws_raw(vec![0xff, 0xff, 0xff, 0x01]);
    fs.push_ws_raw(FakeFeishu::ws_frame(
        &[
            ("type", "event"),
            ("message_id", "bad1"),
            ("sum", "2"),
            ("seq", "5"),
        ],
        b"{}",
    ));
    fs.push_ws_raw(FakeFeishu::ws_frame(
        &[("type", "event"), ("sum", "2"), ("seq", "0")],
        b"{",
    ));
    let not_json = fs.push_ws_parts("event", &json!("x"), 1, &[]);
    fs.push_ws_raw(FakeFeishu::ws_frame(
        &[("type", "event"), ("message_id", "raw-not-json")],
        b"{not json",
    ));
    let unknown = fs.push_ws(&json!({"schema": "2.0", "header": {"event_id": "e-unknown",
        "event_type": "im.chat.disbanded_v1"}, "event": {}}));
    let sealed = fs.push_ws(&json!({"encrypt": "AAAA"}));
    assert_eq!(fs.wait_ws_answer(&unknown).await.code, 200);
    assert_eq!(fs.wait_ws_answer(&sealed).await.code, 400);
    assert_eq!(
        fs.wait_ws_answer(&not_json).await.code,
        200,
        "a JSON string is no event: nothing to do"
    );
    // Still the first connection, and still working.
    say(&s, chat, ALICE, "/new codex still here").await;
    fs.wait_shown(chat, "echo: still here").await;
    assert_eq!(fs.ws_connections(), 1);
}

/// An event recorded (and so acknowledged to Feishu) but not handled when tether stopped
/// is replayed at the next start, once: Feishu would not deliver it again.
#[tokio::test]
async fn an_event_recorded_but_not_handled_before_a_crash_is_replayed_once() {
    let mut s = start().await;
    let chat = "oc_p2p_alice";
    say(&s, chat, ALICE, "/new codex before").await;
    s.fs.wait_shown(chat, "echo: before").await;
    s.d.kill9().await;
    if s.d.database_url().is_none() {
        // What a crash between the answer to Feishu and the hand-over leaves behind.
        let store = tether_store::Store::open(s.d.data_dir()).await.unwrap();
        let ev = s.ev.message(chat, "p2p", ALICE, "left behind", false);
        let id = ev["header"]["event_id"].as_str().unwrap().to_owned();
        assert!(
            store
                .channels()
                .accept_inbound("feishu", &id, &ev.to_string())
                .await
                .unwrap()
        );
        store.close().await;
    } else {
        return;
    }
    s.d.restart().await;
    s.fs.wait_shown(chat, "echo: left behind").await;
    // Handled: another restart does not replay it.
    s.d.restart().await;
    s.fs.wait_ws_connections(3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.fs.count_shown(chat, "echo: left behind"), 1);
}
