//! Reliability: the crash loop on a cluster (issue 12). Three `tether serve` on one
//! PostgreSQL database and one agent home, the fake agent, a fake Telegram bot polled by
//! whichever node leads it: messages go through the API to any live node and people
//! write in two Telegram DMs, while the nodes are killed with SIGKILL, 30 times spread
//! over the three (`TETHER_CRASH_KILLS`; seed `TETHER_CRASH_SEED`), the killed node
//! restarted each time. At the end: every message the API accepted has exactly one turn
//! and it ended; every Telegram DM has exactly one turn, and its reply reached the chat
//! once (a second send is excused only right before a kill: the Bot API has no
//! idempotency key).
//!
//! A turn running on a killed node ends by the failover of the other nodes (or, before
//! conversation ownership, by the killed node's start-up recovery when it restarts).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod reliability_util;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reliability_util::eventually;
use serde_json::{Value, json};
use tether_testkit::fake_telegram::{self, FakeTelegram, private_chat};
use tether_testkit::{Cluster, Daemon, DaemonOptions};

const USERS: [(i64, &str); 2] = [(601, "Uma"), (602, "Vic")];
const API_CONVERSATIONS: usize = 6;
/// A duplicate send is excused when the first one happened this shortly before a kill.
const IN_FLIGHT: Duration = Duration::from_millis(500);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A message the API accepted: its session and turn.
struct Accepted {
    session: String,
    turn: String,
}

/// Sends `text` to `conv` on `d`; `None` when the node is down or refused it.
async fn send(d: &Daemon, conv: &str, text: &str) -> Option<Accepted> {
    let resp = d
        .client
        .post(d.url(&format!("/api/v1/conversations/{conv}/messages")))
        .bearer_auth(&d.token)
        .json(&json!({ "text": text }))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.ok()?;
    assert!(status < 500, "{status}: {body}");
    Some(Accepted {
        session: body["session_id"].as_str()?.to_string(),
        turn: body["turn_id"].as_str()?.to_string(),
    })
}

fn ended(status: &str) -> bool {
    matches!(status, "completed" | "interrupted" | "failed" | "cancelled")
}

#[tokio::test]
async fn a_cluster_killed_thirty_times_loses_and_doubles_nothing() {
    let kills = env_or("TETHER_CRASH_KILLS", 30) as usize;
    let seed = env_or("TETHER_CRASH_SEED", 12);
    let mut rng = StdRng::seed_from_u64(seed);
    let tg = FakeTelegram::start().await;
    let users: Vec<i64> = USERS.iter().map(|u| u.0).collect();
    let config = format!("{}\n[cluster]\nlease_ttl_secs = 2\n", tg.config(&users, ""));
    let mut cluster = Cluster::start(
        3,
        DaemonOptions {
            extra_config: config,
            ..DaemonOptions::default()
        },
    )
    .await;
    let mut convs = Vec::new();
    for i in 0..API_CONVERSATIONS {
        let c = cluster
            .node(i % 3)
            .post_ok("/api/v1/conversations", json!({}))
            .await;
        convs.push(c["id"].as_str().unwrap().to_string());
    }

    let started = Instant::now();
    let mut accepted: Vec<Accepted> = Vec::new();
    let mut dms: Vec<(i64, String)> = Vec::new();
    let mut kill_times: Vec<Instant> = Vec::new();
    for k in 0..kills {
        let victim = rng.gen_range(0..3);
        for _ in 0..3 {
            let node = rng.gen_range(0..3);
            let conv = convs[rng.gen_range(0..convs.len())].clone();
            let text = if rng.gen_bool(0.3) {
                format!("sleep {}", rng.gen_range(100..800))
            } else {
                format!("m{k:03}-{node}")
            };
            if let Some(a) = send(cluster.node(node), &conv, &text).await {
                accepted.push(a);
            }
        }
        let user = USERS[rng.gen_range(0..USERS.len())];
        let text = format!("t{k:03}");
        tg.say(&private_chat(user.0), user, &text);
        dms.push((user.0, text));
        tokio::time::sleep(Duration::from_millis(rng.gen_range(50..700))).await;
        cluster.node_mut(victim).kill9().await;
        kill_times.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..400))).await;
        cluster.node_mut(victim).restart().await;
    }
    eprintln!(
        "cluster crash loop: {kills} kills in {:.1?}, {} API messages accepted, {} DMs",
        started.elapsed(),
        accepted.len(),
        dms.len()
    );
    assert!(accepted.len() > kills, "the workload ran");
    let d = cluster.node(0);

    // Every accepted message has exactly one turn, and it ended.
    let mut by_session: BTreeMap<&str, Vec<&Accepted>> = BTreeMap::new();
    for a in &accepted {
        by_session.entry(a.session.as_str()).or_default().push(a);
    }
    for (session, mine) in &by_session {
        eventually("every accepted message's turn ends", || async {
            let turns = d.get_ok(&format!("/api/v1/sessions/{session}/turns")).await;
            let turns = turns.as_array().unwrap().clone();
            mine.iter()
                .all(|a| {
                    let of_it: Vec<&Value> = turns
                        .iter()
                        .filter(|t| t["id"] == a.turn.as_str())
                        .collect();
                    of_it.len() == 1 && ended(of_it[0]["status"].as_str().unwrap_or(""))
                })
                .then_some(())
        })
        .await;
    }
    for c in &convs {
        let view = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
        assert!(view["id"] == c.as_str(), "{view}");
    }

    // Every DM has exactly one ended turn in its chat's conversation.
    let mut dm_status: BTreeMap<String, String> = BTreeMap::new();
    let list = d.get_ok("/api/v1/conversations").await;
    for (user, _) in USERS {
        let mine: Vec<&String> = dms
            .iter()
            .filter(|(u, _)| *u == user)
            .map(|(_, t)| t)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let conv = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["title"].as_str().unwrap_or("").contains("Telegram"))
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>();
        let turns = eventually("every DM has its turn", || async {
            let mut all = Vec::new();
            for id in &conv {
                let view = d.get_ok(&format!("/api/v1/conversations/{id}")).await;
                if let Some(sid) = view["binding"]["session_id"].as_str() {
                    let turns = d.get_ok(&format!("/api/v1/sessions/{sid}/turns")).await;
                    all.extend(turns.as_array().unwrap().iter().cloned());
                }
            }
            mine.iter()
                .all(|text| {
                    all.iter().any(|t| {
                        t["input"] == text.as_str() && ended(t["status"].as_str().unwrap_or(""))
                    })
                })
                .then_some(all)
        })
        .await;
        for text in &mine {
            let of_it: Vec<&Value> = turns
                .iter()
                .filter(|t| t["input"] == text.as_str())
                .collect();
            assert_eq!(of_it.len(), 1, "DM {text:?} has {} turns", of_it.len());
            let status = of_it[0]["status"].as_str().unwrap_or("").to_string();
            dm_status.insert(text.to_string(), status);
        }
    }

    // Each completed DM's reply reached its chat, once (or twice right before a kill).
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (user, text) in &dms {
        let needle = format!("echo: {text}");
        let sends: Vec<Instant> = tg
            .calls("sendMessage")
            .iter()
            .filter(|c| {
                c.status == 200
                    && c.body["chat_id"] == *user
                    && fake_telegram::plain(c.body["text"].as_str().unwrap_or("")).contains(&needle)
            })
            .map(|c| c.at)
            .collect();
        if dm_status.get(text).is_some_and(|s| s == "completed") {
            assert!(!sends.is_empty(), "the reply to {text:?} was lost");
        }
        if sends.len() > 1 {
            let excused = sends[..sends.len() - 1].iter().all(|at| {
                kill_times
                    .iter()
                    .any(|k| *k >= *at && k.duration_since(*at) <= IN_FLIGHT)
            });
            assert!(excused, "{needle:?} was sent {} times", sends.len());
        }
    }
}
