//! Reliability: load. 200 concurrent API clients (`TETHER_LOAD_CLIENTS`) for 60 s
//! (`TETHER_LOAD_SECS`) against a live daemon with the fake agent — reads, messages (and
//! the queue filling up), event pages and streams, stops, bad requests — get no 5xx and no
//! transport error; afterwards every accepted message has ended, and the daemon holds no
//! more file descriptors, threads, agent processes or live sessions than before (small
//! tolerance), i.e. nothing leaked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::reliability_util::{assert_healthy, eventually, fd_count, live_children, proc_status};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tether_testkit::{Daemon, DaemonOptions};

const CONVERSATIONS: usize = 40;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Tally {
    statuses: BTreeMap<u16, u64>,
    errors: Vec<String>,
    server_errors: Vec<String>,
    latencies_ms: Vec<u64>,
    accepted: Vec<(String, String)>,
}

/// What the daemon's process holds.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    fds: usize,
    threads: u64,
    rss_kb: u64,
    children: usize,
    live: u64,
}

async fn footprint(d: &Daemon) -> Footprint {
    let pid = d.pid().unwrap();
    let live = d.get_ok("/api/v1/pool").await["live"].as_u64().unwrap_or(0);
    Footprint {
        fds: fd_count(pid),
        threads: proc_status(pid, "Threads"),
        rss_kb: proc_status(pid, "VmRSS"),
        children: live_children(pid).len(),
        live,
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    convs: Arc<Vec<(String, String)>>,
    tally: Arc<Mutex<Tally>>,
    id: usize,
}

impl Client {
    async fn run(self, deadline: Instant) {
        let mut rng = StdRng::seed_from_u64(self.id as u64);
        let mut n = 0u64;
        while Instant::now() < deadline {
            n += 1;
            let (conv, session) = &self.convs[rng.gen_range(0..self.convs.len())];
            let roll = rng.gen_range(0..100);
            let started = Instant::now();
            let (what, result) = match roll {
                0..30 => {
                    let p = format!("/api/v1/conversations/{conv}");
                    (p.clone(), self.send(self.get(&p)).await)
                }
                30..45 => {
                    let p = format!("/api/v1/conversations/{conv}/messages?limit=20");
                    (p.clone(), self.send(self.get(&p)).await)
                }
                45..65 => {
                    let p = format!("/api/v1/conversations/{conv}/messages");
                    let text = format!("load {} {n}", self.id);
                    let r = self.send(self.post(&p, json!({ "text": text }))).await;
                    if let Ok((200..=299, body)) = &r {
                        let v: Value = serde_json::from_str(body).unwrap_or_default();
                        if let (Some(s), Some(t)) =
                            (v["session_id"].as_str(), v["turn_id"].as_str())
                        {
                            self.tally
                                .lock()
                                .unwrap()
                                .accepted
                                .push((s.to_owned(), t.to_owned()));
                        }
                    }
                    (p, r)
                }
                65..75 => {
                    let p = format!("/api/v1/sessions/{session}/events?limit=50");
                    (p.clone(), self.send(self.get(&p)).await)
                }
                75..80 => {
                    let p = "/api/v1/conversations?limit=50".to_string();
                    (p.clone(), self.send(self.get(&p)).await)
                }
                80..84 => {
                    let p = "/api/v1/health".to_string();
                    (p.clone(), self.send(self.get(&p)).await)
                }
                84..88 => {
                    let p = "/api/v1/pool".to_string();
                    (p.clone(), self.send(self.get(&p)).await)
                }
                88..93 => {
                    let p = format!("/api/v1/conversations/{conv}/events");
                    (p.clone(), self.sse(&p).await)
                }
                93..96 => {
                    // Bad requests: unknown ids and broken bodies.
                    let p = format!("/api/v1/conversations/{conv}x/messages");
                    let req = self.post_raw(&p, b"{\"text\":".to_vec());
                    (p, self.send(req).await)
                }
                96..98 => {
                    let p = format!("/api/v1/conversations/{conv}/stop");
                    (p.clone(), self.send(self.post(&p, json!({}))).await)
                }
                _ => {
                    let p = format!("/api/v1/conversations/{conv}/messages");
                    (
                        p.clone(),
                        self.send(self.post(&p, json!({"text": "/status"}))).await,
                    )
                }
            };
            let ms = started.elapsed().as_millis() as u64;
            {
                let mut t = self.tally.lock().unwrap();
                t.latencies_ms.push(ms);
                match result {
                    Ok((status, body)) => {
                        *t.statuses.entry(status).or_default() += 1;
                        if status >= 500 {
                            t.server_errors.push(format!("{what}: {status} {body}"));
                        }
                    }
                    Err(e) => t.errors.push(format!("{what}: {e}")),
                }
            }
            let pause = rng.gen_range(50..250);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    fn post(&self, path: &str, body: Value) -> reqwest::RequestBuilder {
        self.post_raw(path, body.to_string().into_bytes())
    }

    fn post_raw(&self, path: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<(u16, String), String> {
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| e.to_string())?;
        Ok((status, body))
    }

    /// Opens the event stream, reads for a moment, hangs up.
    async fn sse(&self, path: &str) -> Result<(u16, String), String> {
        let resp = self.get(path).send().await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let mut stream = resp;
        let _ = tokio::time::timeout(Duration::from_millis(200), stream.chunk()).await;
        Ok((status, String::new()))
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_200_concurrent_clients_get_no_5xx_and_leak_nothing() {
    let secs = env_or("TETHER_LOAD_SECS", 60);
    let clients = env_or("TETHER_LOAD_CLIENTS", 200) as usize;
    let d = Daemon::start(DaemonOptions {
        queue_cap: 8,
        extra_config: "[pool]\nmax_live = 64\nidle_ttl_secs = 0\n".to_string(),
        ..Default::default()
    })
    .await;

    // Warm up: every conversation has a live session.
    let mut convs = Vec::new();
    for i in 0..CONVERSATIONS {
        let c = d.new_conversation(None).await;
        let (o, t) = d.say_and_wait(&c, &format!("warm up {i}")).await;
        assert_eq!(t["status"], "completed", "{t}");
        convs.push((c, o["session_id"].as_str().unwrap().to_string()));
    }
    let before = footprint(&d).await;
    assert_eq!(before.live as usize, CONVERSATIONS, "{before:?}");

    let tally = Arc::new(Mutex::new(Tally::default()));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let convs = Arc::new(convs);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..clients {
        let c = Client {
            http: http.clone(),
            base: d.base.clone(),
            token: d.token.clone(),
            convs: convs.clone(),
            tally: tally.clone(),
            id,
        };
        tasks.spawn(c.run(deadline));
    }
    // Each client ends by itself after the deadline (plus at most one slow request).
    tokio::time::timeout(Duration::from_secs(secs + 60), async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("the clients finish");
    let elapsed = started.elapsed();
    drop(http);

    let mut t = std::mem::take(&mut *tally.lock().unwrap());
    t.latencies_ms.sort_unstable();
    let total: u64 = t.statuses.values().sum();
    eprintln!(
        "load: {clients} clients, {total} requests in {elapsed:.1?} ({:.0}/s), statuses {:?}, \
         latency p50 {} ms p99 {} ms max {} ms, {} messages accepted",
        total as f64 / elapsed.as_secs_f64(),
        t.statuses,
        percentile(&t.latencies_ms, 0.5),
        percentile(&t.latencies_ms, 0.99),
        t.latencies_ms.last().copied().unwrap_or(0),
        t.accepted.len(),
    );
    assert!(
        t.server_errors.is_empty(),
        "5xx: {:?}",
        &t.server_errors[..t.server_errors.len().min(10)]
    );
    assert!(
        t.errors.is_empty(),
        "transport errors: {:?}",
        &t.errors[..t.errors.len().min(10)]
    );
    assert!(
        !t.accepted.is_empty() && total > clients as u64 * 10,
        "the load ran"
    );

    // Every accepted message ends (the queues drain).
    eventually("all turns ended", || async {
        let mut open = 0;
        for (c, _) in convs.iter() {
            let v = d.get_ok(&format!("/api/v1/conversations/{c}")).await;
            if v["state"] != "bound/idle" || v["queue_len"] != 0 {
                open += 1;
            }
        }
        (open == 0).then_some(())
    })
    .await;
    let mut by_session: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (s, tid) in &t.accepted {
        by_session.entry(s).or_default().push(tid);
    }
    for (s, tids) in by_session {
        let page = d.all_turns(s).await;
        let turns: BTreeMap<String, String> = page
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["id"].as_str().unwrap().to_string(),
                    t["status"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for tid in tids {
            let status = turns.get(tid).map(String::as_str).unwrap_or("missing");
            assert!(
                matches!(status, "completed" | "cancelled"),
                "turn {tid} of session {s}: {status}"
            );
        }
    }

    // Nothing leaked: the process settles back to where it was.
    let after = eventually("the daemon's footprint settles", || async {
        let now = footprint(&d).await;
        let settled = now.fds <= before.fds + 8
            && now.threads <= before.threads + 4
            && now.children == before.children
            && now.live == before.live;
        settled.then_some(now)
    })
    .await;
    eprintln!(
        "footprint before {before:?}, after {after:?} (RSS {} → {} kB)",
        before.rss_kb, after.rss_kb
    );
    assert_healthy(&d, "fake").await;
}
