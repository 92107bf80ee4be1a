//! Figure 6, dormant half: tether's RSS per dormant conversation, in one daemon on a
//! store of G + T of them (100 000 + 10 000 by default), two ways:
//!
//! - **G dormant at start**: generated with sqlx (`generate.rs`, as figure 4's store) and
//!   served by `tether serve`, whose start-up recovery leaves every session dormant (the
//!   state after a restart); each is then read through the API
//!   (`GET /api/v1/conversations/{id}`, which must show its session dormant).
//! - **T gone dormant in this daemon**: each created through the API and run for one turn
//!   with its own fake-agent process, `CONCURRENCY` at a time; the pool keeps at most
//!   `MAX_LIVE` processes, so each start evicts the least recently used idle session,
//!   which goes dormant (process ended; actor and routing state dropped once idle).
//!
//! Why not 100 000 of the second kind: each costs about 12 ms of CPU (a process start and
//! end, tether's part and the agent's), so 100 000 would keep both cores busy for some
//! ten minutes; `--dormant-turns 100000` does it when there is time.
//! RSS (`VmRSS` of the daemon only) is read after a warm-up, after the reads and after the
//! turns, each time once no session is busy; `GET /api/v1/runtime` tells how many actors
//! and routing locks remain.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use serde_json::Value;

use crate::daemon::{BenchDaemon, Home, Spec, TURN_LIMIT, write_config};
use crate::generate::{big_store, id};
use crate::report::{Row, Verdict};
use crate::sse_count::read_events;
use crate::stats::{count, mb, ms, secs};

const MAX_LIVE: usize = 16;
/// Conversations used to warm the daemon up: that many generated ones read (and read
/// again when measured) and that many run a turn (not counted).
const WARMUP: usize = 500;
/// Conversations in flight: more than two cores' worth, so process starts overlap.
const CONCURRENCY: usize = 48;
/// Reads in flight.
const READERS: usize = 32;

pub async fn run(generated: usize, events: usize, turned: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let spec = Spec {
        extra_config: format!(
            "[pool]\nmax_live = {MAX_LIVE}\nmax_live_per_owner = 0\nidle_ttl_secs = 0\n"
        ),
        ..Spec::default()
    };
    let config = write_config(home.path(), &spec)?;
    let data = home.path().join("data");
    // Figure 4's store (copied when it ran before): every session dormant after the
    // daemon's start-up recovery.
    let gen_time = big_store(&data, generated, events).await?;
    let daemon = BenchDaemon::launch(home.path(), &config).await?;
    let d = &daemon;
    let start_mem = d.mem()?;
    read_dormant(d, 0..WARMUP.min(generated)).await?;
    make_dormant(d, WARMUP).await?;
    let base = settle(d).await?;

    let t_read = Instant::now();
    read_dormant(d, 0..generated).await?;
    let read_time = t_read.elapsed();
    let after_reads = settle(d).await?;

    let cpu0 = d.cpu_times()?;
    let t0 = Instant::now();
    make_dormant(d, turned).await?;
    let took = t0.elapsed();
    let cpu1 = d.cpu_times()?;
    let after_turns = settle(d).await?;
    let pool = d.get("/api/v1/pool").await?;
    let figures = d.get("/api/v1/runtime").await?;
    daemon.stop().await?;

    let per_conv = |a: Duration, b: Duration| ms(a.saturating_sub(b) / turned.max(1) as u32);
    let (tether_cpu, agents_cpu) = (per_conv(cpu1.0, cpu0.0), per_conv(cpu1.1, cpu0.1));
    let growth = |a: u64, b: u64| a as i64 - b as i64;
    let read_growth = growth(after_reads.rss_kb, base.rss_kb);
    let turn_growth = growth(after_turns.rss_kb, after_reads.rss_kb);
    let read_per = read_growth as f64 / generated.max(1) as f64;
    let turn_per = turn_growth as f64 / turned.max(1) as f64;
    let live = pool["live"].as_u64().unwrap_or(0);
    let goal = "≤ 1 KB per dormant conversation";
    Ok(vec![
        Row::new(
            "6",
            format!(
                "memory per dormant conversation, over {} dormant since start (generated in the store, recovered dormant by `tether serve`, each then read through the API)",
                count(generated as f64)
            ),
            format!(
                "{read_per:.2} KB each: RSS {} → {} after reading all {} ({:+.1} MB)\n(fresh daemon on the store {}; reads in {}; store of {} conversations with {} events generated in {})",
                mb(base.rss_kb),
                mb(after_reads.rss_kb),
                count(generated as f64),
                read_growth as f64 / 1024.0,
                mb(start_mem.rss_kb),
                secs(read_time),
                count(generated as f64),
                count(events as f64),
                secs(gen_time),
            ),
            goal,
            Verdict::of(read_per <= 1.0),
        ),
        Row::new(
            "6",
            format!(
                "memory per conversation gone dormant in the daemon, over {} more (each ran one turn with its own agent process, then the pool, capped at {MAX_LIVE}, evicted it)",
                count(turned as f64)
            ),
            format!(
                "{turn_per:.2} KB each: RSS {} → {} ({:+.1} MB); {:.2} KB per dormant conversation over all {}\n({} conversations with a turn each in {} ({CONCURRENCY} at a time); CPU per conversation: tether {tether_cpu}, its agent {agents_cpu}; {} evictions; {live} processes still live; then {} session actors and {} routing locks)",
                mb(after_reads.rss_kb),
                mb(after_turns.rss_kb),
                turn_growth as f64 / 1024.0,
                growth(after_turns.rss_kb, base.rss_kb) as f64 / (generated + turned).max(1) as f64,
                count((generated + turned) as f64),
                count(turned as f64),
                secs(took),
                pool["evictions"].as_u64().unwrap_or(0),
                figures["actors"],
                figures["routing_locks"],
            ),
            goal,
            Verdict::of(turn_per <= 1.0),
        )
        .was("0.66 KB each"),
    ])
}

/// Reads the generated conversations `range` through the API, `READERS` at a time; each
/// must show a dormant session.
async fn read_dormant(d: &BenchDaemon, range: std::ops::Range<usize>) -> Result<()> {
    futures::stream::iter(range)
        .map(|i| async move {
            let c = d.conversation(&id('c', i)).await?;
            if c["binding"]["status"] != "dormant" {
                bail!("generated conversation {i} is not dormant: {c}");
            }
            anyhow::Ok(())
        })
        .buffer_unordered(READERS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Creates `n` conversations, each running one turn, `CONCURRENCY` at a time.
async fn make_dormant(d: &BenchDaemon, n: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|_| async move {
            let id = d.new_conversation(None).await?;
            let resp = d
                .authed(
                    d.client
                        .get(d.url(&format!("/api/v1/conversations/{id}/events"))),
                )
                .send()
                .await?;
            if resp.status().as_u16() != 200 {
                bail!("SSE: HTTP {}", resp.status());
            }
            let reader = tokio::spawn(turn_end(resp));
            d.say(&id, "hello").await?;
            tokio::time::timeout(TURN_LIMIT, reader)
                .await
                .map_err(|_| anyhow!("a turn did not end within {TURN_LIMIT:?}"))??
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Reads a new conversation's stream until its first turn ends well.
async fn turn_end(resp: reqwest::Response) -> Result<()> {
    let mut ended = None;
    read_events(resp, |ev, _| match ev.kind {
        "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted" => {
            ended = Some(ev.kind.to_owned());
            false
        }
        _ => true,
    })
    .await?;
    match ended.as_deref() {
        Some("turn_completed") => Ok(()),
        Some(other) => bail!("a turn ended with {other}"),
        None => bail!("the event stream ended before the turn did"),
    }
}

/// Waits until no session is busy, then reads memory. (The pool may stay above its cap:
/// a start exceeds it while every live session is busy, and idle sessions above the cap
/// are only evicted by the next start.)
async fn settle(d: &BenchDaemon) -> Result<crate::daemon::Mem> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pool: Value = d.get("/api/v1/pool").await?;
        if pool["busy"] == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the pool did not settle: {pool}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    d.mem()
}
