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
