//! Figure 2 (throughput and scale) and the live half of figure 6: N conversations, each
//! with a live fake-agent session (the pool unlimited), then T turns in all, every
//! conversation sending its next message as soon as its previous turn completed (seen on
//! its own SSE stream). Reports turns/s, turn latency under that load, tether's peak RSS
//! (`VmHWM` of the daemon process only), and its RSS growth per live session.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};

use crate::daemon::{BenchDaemon, Home, Spec};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, count, mb, mb_delta, ms, secs};

const POOL_UNLIMITED: &str = "[pool]\nmax_live = 0\nmax_live_per_owner = 0\nidle_ttl_secs = 0\n";

pub async fn run(conversations: usize, turns: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let spec = Spec {
        extra_config: POOL_UNLIMITED.to_string(),
        ..Spec::default()
    };
    let daemon = BenchDaemon::start(home.path(), &spec).await?;
    let d = &daemon;
    let mut convs = Vec::with_capacity(conversations);
    for _ in 0..conversations {
        let id = d.new_conversation(None).await?;
        let sse = d.events(&id).await?;
        convs.push((id, sse));
    }
    let before = d.mem()?;

    // Start every session (one agent process each), 32 at a time.
    let t_start = Instant::now();
    let convs: Vec<_> = futures::stream::iter(convs)
        .map(|(id, mut sse)| async move {
            d.turn(&id, &mut sse, "hello").await?;
            anyhow::Ok((id, sse))
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let started_in = t_start.elapsed();
    let pool = d.get("/api/v1/pool").await?;
    if pool["live"].as_u64() != Some(conversations as u64) {
        bail!("expected {conversations} live sessions, the pool says {pool}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let live = d.mem()?;

    // The load: every conversation runs its share of the turns back to back.
    let t0 = Instant::now();
    let per = turns / conversations;
    let extra = turns % conversations;
    let lat: Vec<Vec<Duration>> = futures::future::try_join_all(convs.into_iter().enumerate().map(
        |(i, (id, mut sse))| async move {
            let n = per + usize::from(i < extra);
            let mut lat = Vec::with_capacity(n);
            for k in 0..n {
                let t = Instant::now();
                d.turn(&id, &mut sse, &format!("turn {k}")).await?;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        },
    ))
    .await?;
    let wall = t0.elapsed();
    let after = d.mem()?;
    let pool = d.get("/api/v1/pool").await?;
    let lat = Samples::new(lat.into_iter().flatten().collect());
    let done = lat.len();
    let rate = done as f64 / wall.as_secs_f64();
    let peak = after.hwm_kb;
    let met = rate >= 300.0 && peak < 150 * 1024;

    let per_session = (live.rss_kb as i64 - before.rss_kb as i64) / conversations.max(1) as i64;
    let evictions = pool["evictions"].as_u64().unwrap_or(0);
    let stopping = Instant::now();
    daemon.stop().await?;
    let stop_time = stopping.elapsed();
    Ok(vec![
        Row::new(
            "2",
            format!(
                "throughput: {conversations} conversations with live fake-agent sessions, {} turns",
                count(done as f64)
            ),
            format!(
                "{} turns/s ({} turns in {}; turn latency under load p50 {} / p99 {}); tether peak RSS {}\n({} sessions started in {}; {} evictions; stopped with all agents in {})",
                count(rate),
                count(done as f64),
                secs(wall),
                ms(lat.p50()),
                ms(lat.p99()),
                mb(peak),
                conversations,
                secs(started_in),
                evictions,
                secs(stop_time),
            ),
            "≥ 300 turns/s, RSS < 150 MB",
            Verdict::of(met),
        )
        .was("441 turns/s (p50 454 ms / p99 640 ms); peak RSS 63.5 MB"),
        Row::new(
            "6",
            "memory per live session (tether's RSS, the agent process excluded)",
            format!(
                "{} KB per live session (RSS {} with {conversations} conversations and no session → {} with {conversations} live idle sessions)",
                per_session,
                mb(before.rss_kb),
                mb(live.rss_kb),
            ),
            "— (growth of RSS)",
            Verdict::Info,
        )
        .was("43 KB per live session"),
        Row::new(
            "6",
            "memory after the load",
            format!(
                "RSS {} after {} turns ({} vs. the idle live sessions)",
                mb(after.rss_kb),
                count(done as f64),
                mb_delta(after.rss_kb as i64 - live.rss_kb as i64)
            ),
            "—",
            Verdict::Info,
        )
        .was("RSS 63.2 MB (+27.1 MB)"),
    ])
}
