//! Issue 26, items 8 and 9: `/new`, `/new <task>` and `/detach` after a session is bound,
//! on Feishu, Slack and Discord (Telegram's is in `channels_telegram`), each as its users
//! can actually type it; and the forms Slack's client allows, since it takes a message
//! that starts with `/` for a slash command and runs app commands only outside threads:
//! `!new` (any command word with `!`), `@app /new`, and `/tether new` in a DM; in a
//! channel, `/tether <command>` other than `new` says where to type it instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::Cell;
use std::future::Future;

use tether_testkit::fake_slack::{BOT_USER, FakeSlack};
use tether_testkit::{Daemon, DaemonOptions};

/// What a person types for each step on one channel.
struct Forms {
    new: &'static str,
    new_task: &'static str,
    detach: &'static str,
    status: &'static str,
}

const SLASH: Forms = Forms {
    new: "/new",
    new_task: "/new fresh task",
    detach: "/detach",
    status: "/status",
};

/// A bound conversation: bare `/new` rebinds at the next message; `/new <task>` runs the
/// task in a new session; `/detach` unbinds with a status line and the next message
/// starts a new session. `say` sends a text, `shown` waits for tether's message that
/// contains a needle and gives its text.
async fn new_and_detach<F: Future<Output = String>>(
    say: impl Fn(&str),
    shown: impl Fn(&'static str) -> F,
    forms: &Forms,
) {
    say("hello");
    shown("echo: hello").await;
    say("again");
    let r = shown("echo: again").await;
    assert!(r.contains(r#""hello"]"#), "the same session: {r}");

    say(forms.new);
    shown("the next message starts a new").await;
    say("third");
    let r = shown("echo: third").await;
    assert!(r.contains("remembers 0"), "a new session after /new: {r}");

    say(forms.new_task);
    let r = shown("echo: fresh task").await;
    assert!(r.contains("remembers 0"), "the task in a new session: {r}");
    say("fourth");
    let r = shown("echo: fourth").await;
    assert!(
        r.contains(r#"remembers 1: ["fresh task"]"#),
        "continues the task's session: {r}"
    );

    say(forms.detach);
    shown("detached").await;
    say(forms.status);
    let r = shown("state: unbound").await;
    assert!(r.contains("unbound"), "{r}");
    say("after detach");
    let r = shown("echo: after detach").await;
    assert!(
        r.contains("remembers 0"),
        "a new session after /detach: {r}"
    );
}

#[tokio::test]
async fn feishu_new_new_task_and_detach_on_a_bound_chat() {
    use tether_testkit::fake_feishu::{Events, FakeFeishu};
    const ANN: &str = "ou_ann";
    const CHAT: &str = "oc_p2p_ann";
    let fs = FakeFeishu::start().await;
    let ev = Events::new("token-not-configured", None);
    let _d = Daemon::start(DaemonOptions {
        extra_config: fs.long_connection_config(&[ANN], ""),
        ..DaemonOptions::default()
    })
    .await;
    fs.wait_ws_connections(1).await;
    new_and_detach(
        |text| {
            fs.push_ws(&ev.message(CHAT, "p2p", ANN, text, false));
        },
        |needle| async { fs.wait_shown(CHAT, needle).await.text() },
        &SLASH,
    )
    .await;
}

#[tokio::test]
async fn discord_new_new_task_and_detach_on_a_bound_dm() {
    use tether_testkit::fake_discord::FakeDiscord;
    const ANN: &str = "111";
    const DM: &str = "811";
    let dc = FakeDiscord::start().await;
    let _d = Daemon::start(DaemonOptions {
        extra_config: dc.config(&[ANN], ""),
        ..DaemonOptions::default()
    })
    .await;
    dc.wait_ready().await;
    new_and_detach(
        |text| {
            dc.message(DM, None, ANN, text);
        },
        |needle| async { dc.wait_shown(DM, needle).await.content },
        &SLASH,
    )
    .await;
}

async fn slack() -> (FakeSlack, Daemon) {
    let sl = FakeSlack::start().await;
    let d = Daemon::start(DaemonOptions {
        extra_config: sl.config("socket", &["UANN"], ""),
        ..DaemonOptions::default()
    })
    .await;
    sl.wait_connections(1).await;
    (sl, d)
}

/// Slack messages with unique timestamps.
struct Ts(Cell<u32>);

impl Ts {
    fn next(&self) -> String {
        self.0.set(self.0.get() + 1);
        format!("200.{:06}", self.0.get())
    }
}

#[tokio::test]
async fn slack_commands_in_a_dm_as_bang_words_and_the_tether_slash_command() {
    let (sl, _d) = slack().await;
    let ts = Ts(Cell::new(0));
    // `/tether new` and `/tether detach` (the app's slash command, which Slack runs in
    // a DM), `!new <task>` and `!status` typed as messages.
    let forms = Forms {
        new: "slash:new",
        new_task: "!new fresh task",
        detach: "slash:detach",
        status: "!status",
    };
    new_and_detach(
        |text| match text.strip_prefix("slash:") {
            Some(cmd) => {
                sl.push("slash_commands", sl.slash("D1", "UANN", cmd));
            }
            None => {
                sl.push(
                    "events_api",
                    sl.message("D1", "UANN", text, &ts.next(), None),
                );
            }
        },
        |needle| async { sl.wait_shown("D1", needle).await.text() },
        &forms,
    )
    .await;
    // `!stop` stops, `!model` switches; a `!` word that is no command reaches the agent.
    sl.push(
        "events_api",
        sl.message("D1", "UANN", "hang", &ts.next(), None),
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    sl.push(
        "events_api",
        sl.message("D1", "UANN", "!stop", &ts.next(), None),
    );
    // The hanging turn ended: the next message runs.
    sl.push(
        "events_api",
        sl.message("D1", "UANN", "after stop", &ts.next(), None),
    );
    sl.wait_shown("D1", "echo: after stop").await;
    sl.push(
        "events_api",
        sl.message("D1", "UANN", "!model other-model", &ts.next(), None),
    );
    sl.wait_shown("D1", "other-model").await;
    sl.push(
        "events_api",
        sl.message("D1", "UANN", "!important: read me", &ts.next(), None),
    );
    sl.wait_shown("D1", "echo: !important: read me").await;
}

#[tokio::test]
async fn slack_commands_in_a_channel_thread_as_bang_words_and_mentions() {
    let (sl, _d) = slack().await;
    let ts = Ts(Cell::new(0));
    // The thread starts with a mention; its later messages need none.
    let root = ts.next();
    let mention = format!("<@{BOT_USER}> start");
    sl.push(
        "events_api",
        sl.message("C1", "UANN", &mention, &root, None),
    );
    sl.push(
        "events_api",
        sl.mention("C1", "UANN", &mention, &root, None),
    );
    sl.wait_shown("C1", "echo: start").await;
    let in_thread = |text: &str| {
        let t = ts.next();
        sl.push(
            "events_api",
            sl.message("C1", "UANN", text, &t, Some(&root)),
        );
        if text.contains(&format!("<@{BOT_USER}>")) {
            sl.push(
                "events_api",
                sl.mention("C1", "UANN", text, &t, Some(&root)),
            );
        }
    };
    let mention_new = format!("<@{BOT_USER}> /new");
    let mention_detach = format!("<@{BOT_USER}> /detach");
    let forms = Forms {
        new: Box::leak(mention_new.into_boxed_str()),
        new_task: "!new fresh task",
        detach: Box::leak(mention_detach.into_boxed_str()),
        status: "!status",
    };
    new_and_detach(
        in_thread,
        |needle| async {
            let m = sl.wait_shown("C1", needle).await;
            assert_eq!(m.thread_ts.as_deref(), Some(root.as_str()), "in the thread");
            m.text()
        },
        &forms,
    )
    .await;

    // `/tether stop` typed in the channel (Slack runs no app command in a thread) acts
    // on nothing and says where to type it.
    sl.push("slash_commands", sl.slash("C1", "UANN", "stop"));
    let hint = sl
        .wait("an ephemeral hint", |f| {
            f.ephemerals()
                .into_iter()
                .find(|e| e.user == "UANN")
                .map(|e| e.text)
        })
        .await;
    assert!(hint.contains("`!stop`"), "{hint}");
    assert!(hint.contains("`@tether /stop`"), "{hint}");
}
