//! Issue 25: a database restart must not take tether down. A node on a PostgreSQL server
//! of its own, which the test stops (fast: a routine restart; immediate: a crash) and
//! starts again on the same port: while it is down, requests fail fast with the
//! retryable `store_unavailable` (503) and `/ready` says so; once it is back the node
//! serves again by itself, and nothing accepted is lost or doubled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_testkit::postgres::{PgServer, StopMode};
use tether_testkit::{Daemon, DaemonOptions};

/// A message, bounded: an answer must come (never a hang).
async fn post_message(d: &Daemon, conv: &str, text: &str) -> (u16, Value) {
    tokio::time::timeout(
        Duration::from_secs(10),
        d.post(
            &format!("/api/v1/conversations/{conv}/messages"),
            json!({ "text": text }),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("no answer to {text:?} within 10 s"))
}

async fn ready(d: &Daemon) -> (u16, Value) {
    tokio::time::timeout(Duration::from_secs(10), d.get("/api/v1/ready"))
        .await
        .expect("/ready answers")
}

/// Sends `text` until it is accepted (the node serves again); how long that took.
async fn send_until_accepted(d: &Daemon, conv: &str, text: &str) -> (Duration, Value) {
    let start = Instant::now();
    loop {
        let (status, body) = post_message(d, conv, text).await;
        match status {
            200 => return (start.elapsed(), body),
            503 => assert_eq!(body["error"]["code"], "store_unavailable", "{body}"),
            other => panic!("{other} while the database came back: {body}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the node did not serve again within 30 s of the database's return"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every delta of conversation `c` stored once, in order, adding up to `result`, with
/// gap-free seqs, and one end of a turn per turn.
async fn assert_stored_once_in_order(d: &Daemon, c: &str, result: &str) {
    // Every delta stored once, in order, with gap-free seqs.
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/events/page?limit=1000"))
        .await;
    let events = page["events"]
        .as_array()
        .or(page.as_array())
        .unwrap()
        .clone();
    let deltas: String = events
        .iter()
        .filter(|e| e["payload"]["type"] == "message_delta" || e["type"] == "message_delta")
        .map(|e| {
            e["payload"]["text"]
                .as_str()
                .or(e["text"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(deltas, result, "{page}");
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seqs.len(), "a seq twice: {seqs:?}");
    assert!(
        sorted.windows(2).all(|w| w[1] == w[0] + 1),
        "a gap: {sorted:?}"
    );
    let ends = events
        .iter()
        .filter(|e| {
            let t = e["payload"]["type"].as_str().or(e["type"].as_str());
            matches!(t, Some("turn_completed" | "turn_failed" | "turn_cancelled"))
        })
        .count();
    assert_eq!(ends, 1, "{page}");
}

#[tokio::test]
async fn a_node_serves_again_after_the_database_restarts_and_nothing_is_lost_or_doubled() {
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let d = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let (_, turn) = d.say_and_wait(&c, "before").await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert_eq!(ready(&d).await.0, 200);

    let mut accepted = vec!["before".to_owned()];
    for (round, mode) in [StopMode::Fast, StopMode::Immediate]
        .into_iter()
        .enumerate()
    {
        pg.stop(mode).expect("stop PostgreSQL");

        // While it is down: health is the process, ready is the store; requests fail
        // fast with the retryable code, never 500, never a hang.
        assert_eq!(d.get("/api/v1/health").await.0, 200);
        let (status, body) = ready(&d).await;
        assert_eq!(
            (status, body["store"].as_str()),
            (503, Some("unavailable")),
            "{body}"
        );
        for _ in 0..3 {
            let (status, body) = post_message(&d, &c, "while down").await;
            assert_eq!(
                (status, &body["error"]["code"]),
                (503, &json!("store_unavailable")),
                "{body}"
            );
            let (status, body) = tokio::time::timeout(
                Duration::from_secs(10),
                d.get(&format!("/api/v1/conversations/{c}")),
            )
            .await
            .unwrap();
            assert_eq!(
                (status, &body["error"]["code"]),
                (503, &json!("store_unavailable")),
                "{body}"
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        pg.start_again().expect("start PostgreSQL again");
        let text = format!("after restart {round}");
        let (took, out) = send_until_accepted(&d, &c, &text).await;
        eprintln!("{mode:?}: served again {took:?} after the database's return");
        assert!(
            took < Duration::from_secs(10),
            "served again only after {took:?}"
        );
        let turn = d
            .wait_turn(
                out["session_id"].as_str().unwrap(),
                out["turn_id"].as_str().unwrap(),
            )
            .await;
        assert_eq!(turn["status"], "completed", "{turn}");
        assert!(
            turn["result_text"]
                .as_str()
                .unwrap()
                .contains(text.as_str()),
            "{turn}"
        );
        accepted.push(text);
        assert_eq!(ready(&d).await.0, 200);
    }

    // The history holds every accepted message once, and none of the refused ones.
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let users: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, accepted, "{page}");
}

/// A turn streaming while the database restarts keeps its agent: what it streamed while
/// the database was down waits in memory and is stored, in order and once, when the
/// database is back; the turn ends once, completed.
#[tokio::test]
async fn a_turn_streaming_through_a_database_restart_keeps_every_event_once_and_in_order() {
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let d = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let (status, out) = post_message(&d, &c, "stream 30 100").await;
    assert_eq!(status, 200, "{out}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.start_again().expect("start PostgreSQL again");
    let back = Instant::now();
    while ready(&d).await.0 != 200 {
        assert!(back.elapsed() < Duration::from_secs(10), "not ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let turn = d
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let want: String = (1..=30).map(|i| format!("chunk {i} ")).collect();
    let result = turn["result_text"].as_str().unwrap().to_owned();
    assert!(result.starts_with(&want), "{result}");

    assert_stored_once_in_order(&d, &c, &result).await;
}

/// Telegram messages sent while the database is down are answered once each, in order,
/// when it is back: an update not recorded is fetched again (the offset does not move),
/// and one recorded but refused by the runtime waits in its chat's lane.
#[tokio::test]
async fn telegram_messages_sent_while_the_database_is_down_are_answered_once_when_it_is_back() {
    use tether_testkit::fake_telegram::{FakeTelegram, private_chat};
    const ANN: i64 = 111;
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let tg = FakeTelegram::start().await;
    let _daemon = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        extra_config: tg.config(&[ANN], ""),
        ..DaemonOptions::default()
    })
    .await;
    let say = |id: i64, text: &str| {
        let m = json!({
            "message_id": id, "date": 0, "chat": private_chat(ANN),
            "from": {"id": ANN, "is_bot": false, "first_name": "Ann"}, "text": text,
        });
        tg.push(tg.make_update("message", m));
    };
    say(1, "first");
    tg.wait_shown(ANN, "echo: first").await;

    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    for (i, text) in ["down one", "down two", "down three"].iter().enumerate() {
        say(2 + i as i64, text);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    pg.start_again().expect("start PostgreSQL again");

    for text in ["echo: down one", "echo: down two", "echo: down three"] {
        tg.wait_shown(ANN, text).await;
    }
    // Settled: nothing answered twice.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for text in [
        "echo: first",
        "echo: down one",
        "echo: down two",
        "echo: down three",
    ] {
        assert_eq!(tg.count_shown(ANN, text), 1, "{text}");
    }
}

/// Three nodes, each with a live conversation, and the database down for longer than a
/// lease: every heartbeat and presence lock lapses with it, yet once it is back no node
/// takes another's conversations over; each serves its own again, in the same session.
#[tokio::test]
async fn a_cluster_rides_out_a_database_restart_without_a_take_over_storm() {
    use tether_testkit::Cluster;
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let cluster = Cluster::start_on(
        3,
        DaemonOptions {
            extra_config: "\n[cluster]\nlease_ttl_secs = 2\n".to_owned(),
            ..DaemonOptions::default()
        },
        &pg.url(),
    )
    .await;
    let mut convs = Vec::new();
    for i in 0..3 {
        let n = cluster.node(i);
        let c = n.new_conversation(None).await;
        let (_, turn) = n.say_and_wait(&c, "first").await;
        assert_eq!(turn["status"], "completed", "{turn}");
        convs.push((c, turn["session_id"].as_str().unwrap().to_owned()));
    }

    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    tokio::time::sleep(Duration::from_secs(5)).await;
    pg.start_again().expect("start PostgreSQL again");
    let back = Instant::now();
    for i in 0..3 {
        while ready(cluster.node(i)).await.0 != 200 {
            assert!(
                back.elapsed() < Duration::from_secs(10),
                "node {i} not ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Three leases for the sweeps to act, had they wanted to.
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Each node still owns its own conversation (a take-over moves the row, then
    // releases it).
    let view = cluster.node(0).get_ok("/api/v1/cluster").await;
    for n in view["nodes"].as_array().unwrap() {
        assert_eq!(n["alive"], true, "{view}");
        assert_eq!(n["live_conversations"], 1, "a take-over happened: {view}");
    }
    for (i, (c, session)) in convs.iter().enumerate() {
        let n = cluster.node(i);
        assert!(
            n.pool_sessions().await.contains(session),
            "node {i} lost its session"
        );
        let (_, turn) = n.say_and_wait(c, "second").await;
        assert_eq!(turn["status"], "completed", "{turn}");
        assert_eq!(
            turn["session_id"].as_str(),
            Some(session.as_str()),
            "{turn}"
        );
        let page = n
            .get_ok(&format!("/api/v1/conversations/{c}/messages"))
            .await;
        assert!(
            !page.to_string().contains("another took over"),
            "node {i}'s conversation was taken over: {page}"
        );
    }
}

/// A PostgreSQL crash in the middle of group commits: six conversations stream at once
/// (their batches share the writer's transactions), the server is killed (`immediate`)
/// twice while they do. Every turn ends once, completed, and every conversation has each
/// of its events once, in order: a group whose commit's answer was lost is read back
/// before anything is retried.
#[tokio::test]
async fn a_database_crash_in_the_middle_of_group_commits_stores_every_event_once() {
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let d = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        ..DaemonOptions::default()
    })
    .await;
    let mut turns = Vec::new();
    for _ in 0..6 {
        let c = d.new_conversation(None).await;
        let (status, out) = post_message(&d, &c, "rate 800 400").await;
        assert_eq!(status, 200, "{out}");
        turns.push((c, out));
    }
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        pg.stop(StopMode::Immediate).expect("kill PostgreSQL");
        tokio::time::sleep(Duration::from_millis(700)).await;
        pg.start_again().expect("start PostgreSQL again");
    }
    let back = Instant::now();
    while ready(&d).await.0 != 200 {
        assert!(back.elapsed() < Duration::from_secs(10), "not ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let want: String = (1..=800).map(|i| format!("chunk {i} ")).collect();
    for (c, out) in &turns {
        let turn = d
            .wait_turn(
                out["session_id"].as_str().unwrap(),
                out["turn_id"].as_str().unwrap(),
            )
            .await;
        assert_eq!(turn["status"], "completed", "{turn}");
        let result = turn["result_text"].as_str().unwrap();
        assert!(result.starts_with(&want), "{result}");
        assert_stored_once_in_order(&d, c, result).await;
    }
    // The batches did share commits (else this test would not be about group commits).
    let rt = d.get_ok("/api/v1/runtime").await;
    let (batches, commits) = (
        rt["streamed_batches"].as_u64().unwrap(),
        rt["event_commits"].as_u64().unwrap(),
    );
    assert!(commits < batches, "no group commit: {rt}");
}

/// Slack (Socket Mode) messages sent while the database is down are answered once each
/// when it is back: an envelope that could not be recorded is not acknowledged, so Slack
/// delivers it again (here: the fake's retry of every unacknowledged envelope).
#[tokio::test]
async fn slack_messages_sent_while_the_database_is_down_are_answered_once_when_it_is_back() {
    use tether_testkit::fake_slack::FakeSlack;
    const ANN: &str = "UANN";
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let sl = FakeSlack::start().await;
    let _daemon = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        extra_config: sl.config("socket", &[ANN], ""),
        ..DaemonOptions::default()
    })
    .await;
    sl.wait_connections(1).await;
    let say = |n: u32, text: &str| {
        sl.push(
            "events_api",
            sl.message("D1", ANN, text, &format!("100.00000{n}"), None),
        )
    };
    say(1, "first");
    sl.wait_shown("D1", "echo: first").await;

    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    for (i, text) in ["down one", "down two", "down three"].iter().enumerate() {
        say(2 + i as u32, text);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let unacked = sl.unacked().len();
    assert!(unacked >= 1, "an envelope was acknowledged unrecorded");
    pg.start_again().expect("start PostgreSQL again");

    // Slack retries what was not acknowledged until it is.
    let back = Instant::now();
    while !sl.unacked().is_empty() {
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "still unacknowledged: {:?}",
            sl.unacked()
        );
        sl.redeliver();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for text in ["echo: down one", "echo: down two", "echo: down three"] {
        sl.wait_shown("D1", text).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for text in [
        "echo: first",
        "echo: down one",
        "echo: down two",
        "echo: down three",
    ] {
        assert_eq!(sl.count_shown("D1", text), 1, "{text}");
    }
}

/// Feishu (long connection) events sent while the database is down are answered with a
/// failure (so Feishu delivers them again) and, delivered again once it is back, are
/// answered once each.
#[tokio::test]
async fn feishu_events_sent_while_the_database_is_down_are_answered_once_when_it_is_back() {
    use tether_testkit::fake_feishu::{Events, FakeFeishu};
    const ANN: &str = "ou_ann";
    const CHAT: &str = "oc_p2p_ann";
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let fs = FakeFeishu::start().await;
    let ev = Events::new("token-not-configured", None);
    let _daemon = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        extra_config: fs.long_connection_config(&[ANN], ""),
        ..DaemonOptions::default()
    })
    .await;
    fs.wait_ws_connections(1).await;
    let say = |text: &str| fs.push_ws(&ev.message(CHAT, "p2p", ANN, text, false));
    say("first");
    fs.wait_shown(CHAT, "echo: first").await;

    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    let mut sent = Vec::new();
    for text in ["down one", "down two", "down three"] {
        sent.push(say(text));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &sent {
        let a = fs.wait_ws_answer(id).await;
        assert_eq!(a.code, 500, "answered while the store is away: {a:?}");
    }
    pg.start_again().expect("start PostgreSQL again");

    let back = Instant::now();
    while fs.ws_unanswered() > 0 {
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "{} events still not answered with 200",
            fs.ws_unanswered()
        );
        fs.redeliver_ws();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for text in ["echo: down one", "echo: down two", "echo: down three"] {
        fs.wait_shown(CHAT, text).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for text in [
        "echo: first",
        "echo: down one",
        "echo: down two",
        "echo: down three",
    ] {
        assert_eq!(fs.count_shown(CHAT, text), 1, "{text}");
    }
}

/// A tmpfs of `mb` megabytes mounted at a new directory, unmounted on drop (`None` when
/// this process may not mount: not root).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mb: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        // The last bytes that fit.
        while f.write_all(&chunk[..512]).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// SQLite on a full disk: writes answer 503 `store_unavailable` (never 500), `/ready`
/// says so, reads still answer; once there is space again the node serves by itself,
/// every accepted turn ends completed, and the database is sound.
#[tokio::test]
async fn sqlite_on_a_full_disk_answers_store_unavailable_and_serves_again_when_space_is_back() {
    let Some(disk) = SmallDisk::mount(24) else {
        // CI runs as root; a developer's unprivileged run cannot mount a tmpfs.
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let data = disk.dir.path().join("data");
    let mut d = Daemon::start(DaemonOptions {
        data_dir: Some(data.clone()),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let (_, turn) = d.say_and_wait(&c, "before").await;
    assert_eq!(turn["status"], "completed", "{turn}");

    let filler = disk.fill();
    // Writes go on while SQLite still has room in its files; big messages in new
    // conversations until one is refused.
    let big = "x".repeat(60 * 1024);
    let mut accepted = Vec::new();
    let mut refused = None;
    for i in 0..400 {
        let (status, body) = tokio::time::timeout(
            Duration::from_secs(10),
            d.post("/api/v1/conversations", json!({})),
        )
        .await
        .expect("an answer");
        let conv = match status {
            200 | 201 => body["id"].as_str().unwrap().to_owned(),
            503 => {
                refused = Some(body);
                break;
            }
            other => panic!("{other} on a full disk: {body}"),
        };
        let (status, body) = post_message(&d, &conv, &format!("{i} {big}")).await;
        match status {
            200 => accepted.push(body),
            503 => {
                refused = Some(body);
                break;
            }
            other => panic!("{other} on a full disk: {body}"),
        }
    }
    let refused = refused.expect("a write refused on a full disk");
    assert_eq!(refused["error"]["code"], "store_unavailable", "{refused}");
    // `/ready` writes a row: 503 when even that fails; SQLite may still find room for a
    // write that small in its write-ahead log, so 200 is honest too.
    let (status, body) = ready(&d).await;
    match status {
        503 => assert_eq!(body["store"], "unavailable", "{body}"),
        200 => {}
        other => panic!("/ready on a full disk: {other} {body}"),
    }
    // Reads need no space.
    let (status, body) = tokio::time::timeout(
        Duration::from_secs(10),
        d.get(&format!("/api/v1/conversations/{c}/messages")),
    )
    .await
    .expect("an answer");
    assert_eq!(status, 200, "{body}");

    std::fs::remove_file(&filler).unwrap();
    let (took, out) = send_until_accepted(&d, &c, "after").await;
    assert!(
        took < Duration::from_secs(10),
        "served again {took:?} after space came back"
    );
    // The turns accepted before the disk filled end first, each after its own wait for
    // the store (backing off to 2 s): on a loaded machine that takes longer than 20 s.
    let turn = d
        .wait_turn_for(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
            Duration::from_secs(90),
        )
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .contains("echo: after"),
        "{turn}"
    );
    for out in &accepted {
        let turn = d
            .wait_turn(
                out["session_id"].as_str().unwrap(),
                out["turn_id"].as_str().unwrap(),
            )
            .await;
        assert_eq!(turn["status"], "completed", "{turn}");
    }
    d.kill9().await;
    let store = tether_store::Store::open(&data)
        .await
        .expect("the store opens");
    assert!(
        store.integrity_check().await.unwrap(),
        "the database is sound"
    );
}

/// An approval the agent asks for while the database is down waits with the turn (it is
/// not denied): once the database is back it is stored, after the events before it, and
/// can be answered; the turn then goes on in the same session.
#[tokio::test]
async fn an_approval_asked_while_the_database_is_down_waits_for_it_and_can_be_answered() {
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let d = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let (status, out) = post_message(&d, &c, "slowapprove 1500 deploy").await;
    assert_eq!(status, 200, "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    // The agent asks while the database is away.
    tokio::time::sleep(Duration::from_secs(3)).await;
    pg.start_again().expect("start PostgreSQL again");

    let a = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let (status, list) = d.get("/api/v1/approvals").await;
            if status == 200
                && let Some(a) = list
                    .as_array()
                    .and_then(|l| l.iter().find(|a| a["title"] == "deploy"))
            {
                return a.clone();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the approval is stored once the database is back");
    assert_eq!(a["status"], "pending", "{a}");
    let id = a["id"].as_str().unwrap();
    let r = d
        .post_ok(
            &format!("/api/v1/approvals/{id}"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r["status"], "allowed", "{r}");
    let turn = d
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert!(
        turn["result_text"]
            .as_str()
            .unwrap()
            .starts_with("approval: allowed"),
        "{turn}"
    );
    // Stored once: one request, one resolution.
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/events/page?limit=1000"))
        .await;
    let kinds = |k: &str| page.to_string().matches(&format!("\"{k}\"")).count();
    assert_eq!(kinds("approval_requested"), 1, "{page}");
    assert_eq!(kinds("approval_resolved"), 1, "{page}");
}

/// A network black hole between the node and its database (the server neither answers
/// nor closes anything, as when the link is cut or the server's host froze), unlike a
/// restart: requests still fail fast with `store_unavailable` (within the query
/// time-out, here 2 s) rather than hang, `/ready` says so, and once traffic passes again
/// the node serves by itself (its silent connections are checked and replaced), with
/// nothing lost or doubled.
#[tokio::test]
async fn a_database_behind_a_network_black_hole_fails_fast_and_serves_again() {
    use tether_testkit::black_hole::BlackHole;
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let port = pg
        .url()
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next().map(str::to_owned))
        .unwrap();
    let hole = BlackHole::start(&format!("127.0.0.1:{port}"))
        .await
        .expect("a relay");
    let url = pg
        .url()
        .replace(&format!(":{port}/"), &format!(":{}/", hole.port()));
    let d = Daemon::start(DaemonOptions {
        database_url: Some(url),
        store_extra: "query_timeout_secs = 2\n".to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let (_, turn) = d.say_and_wait(&c, "before").await;
    assert_eq!(turn["status"], "completed", "{turn}");

    hole.swallow();
    for i in 0..3 {
        let start = Instant::now();
        let (status, body) = post_message(&d, &c, &format!("into the hole {i}")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (503, Some("store_unavailable")),
            "{body}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "answered after {:?}",
            start.elapsed()
        );
    }
    let (status, body) = ready(&d).await;
    assert_eq!(status, 503, "{body}");

    hole.release();
    let (took, out) = send_until_accepted(&d, &c, "after").await;
    assert!(
        took < Duration::from_secs(10),
        "served again after {took:?}"
    );
    let turn = d
        .wait_turn(
            out["session_id"].as_str().unwrap(),
            out["turn_id"].as_str().unwrap(),
        )
        .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    let text = page.to_string();
    for needle in ["before", "after"] {
        assert_eq!(
            text.matches(&format!("\"{needle}\"")).count(),
            1,
            "{needle} once: {page}"
        );
    }
}

/// A turn whose database stays away longer than `store_outage_limit_secs` is stopped and,
/// once the database is back, ends `interrupted` with a status line saying why; the
/// session stays bound and the next message resumes it.
#[tokio::test]
async fn a_turn_outlasting_the_outage_limit_ends_interrupted_and_the_session_resumes() {
    let pg = PgServer::start_durable().expect("a private PostgreSQL server");
    let d = Daemon::start(DaemonOptions {
        database_url: Some(pg.url()),
        top_config: "store_outage_limit_secs = 2\n".to_owned(),
        ..DaemonOptions::default()
    })
    .await;
    let c = d.new_conversation(None).await;
    let (status, out) = post_message(&d, &c, "stream 100 100").await;
    assert_eq!(status, 200, "{out}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    pg.stop(StopMode::Fast).expect("stop PostgreSQL");
    tokio::time::sleep(Duration::from_secs(4)).await;
    pg.start_again().expect("start PostgreSQL again");
    // Reads answer 503 until the store has reconnected.
    let back = Instant::now();
    while ready(&d).await.0 != 200 {
        assert!(back.elapsed() < Duration::from_secs(10), "not ready again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let session = out["session_id"].as_str().unwrap();
    let turn = d.wait_turn(session, out["turn_id"].as_str().unwrap()).await;
    assert_eq!(turn["status"], "interrupted", "{turn}");
    let page = d
        .get_ok(&format!("/api/v1/conversations/{c}/messages"))
        .await;
    assert!(
        page.to_string()
            .contains("the database was unreachable for too long"),
        "{page}"
    );
    let (_, next) = d.say_and_wait(&c, "after").await;
    assert_eq!(next["status"], "completed", "{next}");
    assert_eq!(next["session_id"].as_str(), Some(session), "{next}");
    assert!(
        next["result_text"]
            .as_str()
            .unwrap()
            .contains("remembers 1"),
        "{next}"
    );
}
